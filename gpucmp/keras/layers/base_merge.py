"""Merge: the shared body of Add and Multiply (elementwise over a list of inputs).

As Keras: the layer is called on a list of tensors (at least one) with one batch size;
shapes Keras rejects raise its ValueError ("Inputs have incompatible shapes"). Keras
would broadcast shapes that differ by 1-sized or missing axes; the plan's elementwise
nodes take equal shapes only, so those are a NotImplementedError.

Masks (Keras 3 ``Merge.compute_mask``): when every input carries one, the output's mask
is their logical OR (a "mask_or" plan node); when some input has none, the output has
none.
"""
from .layer import Layer, format_shape, is_shape_list


def elementwise_shape(shape1, shape2):
    """Keras' broadcast of two per-sample shapes (ValueError when incompatible)."""
    if len(shape1) < len(shape2):
        return elementwise_shape(shape2, shape1)
    if not shape2:
        return tuple(shape1)
    out = list(shape1[:-len(shape2)])
    for i, j in zip(shape1[-len(shape2):], shape2):
        if i is None or j is None:
            out.append(None)
        elif i == 1:
            out.append(j)
        elif j == 1:
            out.append(i)
        elif i != j:
            raise ValueError(f"Inputs have incompatible shapes. Received shapes "
                             f"{tuple(shape1)} and {tuple(shape2)}")
        else:
            out.append(i)
    return tuple(out)


class Merge(Layer):
    _kind = None          # the plan node kind ('add' | 'multiply')
    supports_masking = True

    def merge_mask(self, flat, in_masks):
        """Keras' rule: None if some input is unmasked, else the OR of the masks."""
        if any(m is None for m in in_masks):
            return None
        return flat.add_mask_or(self, in_masks)

    def _check_inputs(self, input_shape):
        if not is_shape_list(input_shape):
            raise ValueError("A merge layer should be called on a list of inputs. "
                             f"Received: input_shape={format_shape(input_shape)} (not a list "
                             "of shapes)")
        batches = {s[0] for s in input_shape if s} - {None}
        if len(batches) > 1:
            raise ValueError("Cannot merge tensors with different batch sizes. Received tensors "
                             f"with shapes {format_shape(input_shape)}")
        out = tuple(input_shape[0][1:])
        for s in input_shape[1:]:
            out = elementwise_shape(out, tuple(s[1:]))
        for i, s in enumerate(input_shape):
            if tuple(s[1:]) != tuple(input_shape[0][1:]):
                raise NotImplementedError(
                    f"Layer '{self.name}' ({type(self).__name__}): input {i} has shape "
                    f"{format_shape(s)} and input 0 {format_shape(input_shape[0])}; Keras would "
                    "broadcast them, gpucmp's plan merges equal shapes only")
        return (input_shape[0][0],) + out

    def build(self, input_shape):
        self._check_inputs(input_shape)
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        return self._check_inputs(input_shape)

    def plan_layers(self, input_shape):
        if len(input_shape) == 1:
            return []                        # a merge of one tensor is that tensor
        shape = tuple(input_shape[0][1:])
        return [{"kind": self._kind, "in_shape": shape, "out_shape": shape}]

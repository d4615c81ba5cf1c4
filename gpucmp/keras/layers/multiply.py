"""Multiply: the elementwise product of a list of tensors of one shape.

The plan's ``multiply`` node takes two inputs; a product of n > 2 tensors is lowered to
n - 1 of them, left to right (((x0 * x1) * x2) ...), as Keras evaluates it.

Masked inputs: Keras 3's Multiply changes the values there (masked entries count as 1 in
the product, and the output is 0 where no input is unmasked); gpucmp's plan does not do
that yet, so a masked input is a NotImplementedError (Add and Concatenate take masks).
"""
from .base_merge import Merge


class Multiply(Merge):
    _kind = "multiply"

    def merge_mask(self, flat, in_masks):
        raise NotImplementedError(
            f"Layer '{self.name}' (Multiply): masked inputs are not supported by gpucmp's plan yet "
            "(Keras replaces masked entries by 1 before the product); use Add or Concatenate, or "
            "drop the mask before the merge")

    def plan_layers(self, input_shape):
        if len(input_shape) == 1:
            return []
        shape = tuple(input_shape[0][1:])
        descs = [{"kind": "multiply", "in_shape": shape, "out_shape": shape, "_args": [0, 1]}]
        for i in range(2, len(input_shape)):   # the previous product times argument i
            descs.append({"kind": "multiply", "in_shape": shape, "out_shape": shape, "_args": [i]})
        return descs

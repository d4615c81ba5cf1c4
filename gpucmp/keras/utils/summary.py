"""model.summary(): Keras 3's table, drawn without the ``rich`` package.

Layout as Keras 3 prints it: a heavy-ruled header (Layer (type) | Output Shape |
Param #), one row per layer separated by light rules,
counts with thousands separators, then Total / Trainable / Non-trainable params with
their size (4 bytes each), and "Optimizer params" once the optimizer has run.
Column widths follow Keras: line_length = min(88, terminal columns - 4), positions
0.45 / 0.80 / 1.0, shrunk the way rich shrinks a table to fit (``_ratio_reduce``).

A functional model that is not sequential-like (Keras' test: more than one node at some
depth, a node with several inputs, or a layer called twice) gets Keras' fourth column,
"Connected to" (``conv1_conv[0][0]``: the producing layer, its node index and tensor
index; comma-separated, wrapped, for a merge), with line_length 108 and positions
0.3 / 0.56 / 0.74 / 1.0. Its rows are ``model.layers``, InputLayers included.
"""
import math
import shutil

from ..layers.layer import format_shape


def readable_memory_size(nbytes):
    units = ["B", "KB", "MB", "GB", "TB", "PB"]
    for unit in units:
        if nbytes / 1024 < 1:
            return f"{nbytes:.2f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.2f} {units[-1]}"


def _ratio_reduce(total, ratios, maximums, values):
    """rich._ratio.ratio_reduce: take ``total`` away from ``values`` in proportion to ``ratios``."""
    ratios = [r if m else 0 for r, m in zip(ratios, maximums)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return list(values)
    remaining = total
    out = []
    for ratio, maximum, value in zip(ratios, maximums, values):
        if ratio and total_ratio > 0:
            dist = min(maximum, round(ratio * remaining / total_ratio))
            out.append(value - dist)
            remaining -= dist
            total_ratio -= ratio
        else:
            out.append(value)
    return out


def column_widths(line_length, positions):
    """Content widths of the columns (without the one-space padding on each side)."""
    widths, current = [], 0
    for pos in positions:
        w = int(pos * line_length) - current
        if w < 4:
            raise ValueError("Insufficient console width to print summary.")
        widths.append(w)
        current += w
    padded = [w + 2 for w in widths]
    available = line_length - (len(widths) + 1)          # the vertical rules
    if sum(padded) > available:
        padded = _ratio_reduce(sum(padded) - available, [1] * len(padded), padded, padded)
    return [w - 2 for w in padded]


def _wrap(text, width):
    """Word-wrap like rich: words move to the next line; a word longer than the column
    is cut with an ellipsis (rich's overflow='ellipsis')."""
    lines, line = [], ""
    for word in text.split(" "):
        if len(word) > width:
            word = word[:width - 1] + "…"
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line += " " + word
        else:
            lines.append(line)
            line = word
    lines.append(line)
    return lines


def _row(cells, widths, aligns, bar, bottom=False):
    """Text lines of one table row; header cells (``bottom``) sit on the last line, as rich draws them."""
    wrapped = [_wrap(c, w) for c, w in zip(cells, widths)]
    height = max(len(w) for w in wrapped)
    if bottom:
        wrapped = [[""] * (height - len(w)) + w for w in wrapped]
    out = []
    for i in range(height):
        parts = []
        for lines, w, a in zip(wrapped, widths, aligns):
            text = lines[i] if i < len(lines) else ""
            if a == "right":
                text = text.rjust(w)
            elif a == "center":
                left = (w - len(text)) // 2
                text = " " * left + text + " " * (w - len(text) - left)
            else:
                text = text.ljust(w)
            parts.append(" " + text + " ")
        out.append(bar + bar.join(parts) + bar)
    return out


def _rule(widths, left, fill, mid, right):
    return left + mid.join(fill * (w + 2) for w in widths) + right


def _sequential_like(model):
    graph = getattr(model, "_graph", None)
    return graph is None or graph.is_sequential_like()


def _connections(model, layer):
    """Keras' "Connected to" cell: every input of every call of ``layer`` in ``model``."""
    parts = []
    for node in model._graph.nodes_of(layer):
        for t in node.input_tensors:
            h = t._keras_history
            parts.append(f"{h.operation.name}[{h.node_index}][{h.tensor_index}]")
    return ", ".join(parts) or "-"


def layer_rows(model, expand_nested=False, show_trainable=False, prefix="", connected=False):
    rows = []
    for layer in model.layers:
        name = f"{prefix}{layer.name} ({type(layer).__name__})"
        if layer.built:
            try:
                shape = format_shape(layer.output_shape)
            except (AttributeError, ValueError, NotImplementedError):
                shape = "?"
            params = f"{layer.count_params():,}"
        else:
            shape, params = "?", "0 (unbuilt)"
        row = [name, shape, params]
        if connected:
            row.append(_connections(model, layer) if not prefix else "")
        if show_trainable:
            row.append(("Y" if layer.trainable else "N") if layer.weights else "-")
        rows.append(row)
        if expand_nested and hasattr(layer, "layers") and hasattr(layer, "_chain"):
            level = prefix.count("└") + 1
            nested = layer_rows(layer, True, show_trainable, "   " * level + "└ ")
            if connected:
                nested = [r[:3] + [""] + r[3:] for r in nested]
            rows.extend(nested)
    return rows


def summary_text(model, line_length=None, positions=None, expand_nested=False,
                 show_trainable=False):
    connected = not _sequential_like(model)
    if connected:
        default = 108
        positions = list(positions or [0.3, 0.56, 0.74, 1.0])
        header = ["Layer (type)", "Output Shape", "Param #", "Connected to"]
        aligns = ["left", "left", "right", "left"]
    else:
        default = 88
        positions = list(positions or [0.45, 0.80, 1.0])
        header = ["Layer (type)", "Output Shape", "Param #"]
        aligns = ["left", "left", "right"]
    if show_trainable:
        default += 12
        positions = [p * 0.90 for p in positions] + [1.0]
        header.append("Trainable")
        aligns.append("center")
    default = min(default, shutil.get_terminal_size().columns - 4)
    line_length = line_length or default
    widths = column_widths(line_length, positions)

    lines = [f'Model: "{model.name}"', _rule(widths, "┏", "━", "┳", "┓")]
    lines += _row(header, widths, aligns, "┃", bottom=True)
    lines.append(_rule(widths, "┡", "━", "╇", "┩"))
    rows = layer_rows(model, expand_nested, show_trainable, connected=connected)
    for i, row in enumerate(rows):
        if i:
            lines.append(_rule(widths, "├", "─", "┼", "┤"))
        lines += _row(row, widths, aligns, "│")
    lines.append(_rule(widths, "└", "─", "┴", "┘"))

    trainable = sum(math.prod(w.shape) for w in model.trainable_weights)
    non_trainable = sum(math.prod(w.shape) for w in model.non_trainable_weights)
    opt = getattr(model, "optimizer", None)
    opt_count = opt.count_params() if (getattr(model, "compiled", False) and opt is not None
                                       and opt.built) else 0
    total = trainable + non_trainable + opt_count
    lines.append(f" Total params: {total:,} ({readable_memory_size(total * 4)})")
    lines.append(f" Trainable params: {trainable:,} ({readable_memory_size(trainable * 4)})")
    lines.append(f" Non-trainable params: {non_trainable:,} "
                 f"({readable_memory_size(non_trainable * 4)})")
    if opt_count:
        lines.append(f" Optimizer params: {opt_count:,} ({readable_memory_size(opt_count * 4)})")
    return "\n".join(lines) + "\n"


def print_summary(model, line_length=None, positions=None, print_fn=None, expand_nested=False,
                  show_trainable=False):
    text = summary_text(model, line_length, positions, expand_nested, show_trainable)
    if print_fn is None:
        import sys
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        print_fn(text)          # Keras 3 passes the whole table as one string

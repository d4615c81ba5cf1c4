"""Weight-gradient sweep: every ResNet-50 convolution's filter pass (batch 256, bf16, no bias)
timed under each kernel and block shape the build offers, to see what the automatic choice
leaves on the table.

Per layer: auto (and the kernel it ran), each value of cuda.conv2d.wgrad, and each block shape
of cuda.conv2d.wgrad_wgmma; median ms of one call (bench_conv, operands resident).

    python benchmarks/sweep_wgrad.py [--batch 256] [--dtype bfloat16] [--layers N ...] [--bias]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_conv import gpucmp_seconds, resnet50_layers  # noqa: E402
from common import header  # noqa: E402


def timed(device, layer, dtype, bias, force):
    from gpucmp import _core
    for point, value in force.items():
        _core.force_variant(point, value)
    try:
        t = gpucmp_seconds(device, layer[:10], dtype, "own", "bwd_filter", 5, bias=bias)
        ran = {p: _core.variant_last(p) for p in ("cuda.conv2d.wgrad", "cuda.conv2d.wgrad_wgmma")}
    finally:
        for point in force:
            _core.reset_variants(point)
    return t, ran


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--bias", action="store_true")
    ap.add_argument("--layers", nargs="*", type=int, help="indices into the ResNet-50 layer list")
    a = ap.parse_args()
    import gpucmp
    from gpucmp import _core
    device = "cuda:0"
    pts = _core.variants()
    if "cuda.conv2d.wgrad" not in pts or device not in gpucmp.available_devices():
        sys.exit("sweep_wgrad: needs a CUDA device (cuda:0) and a build with the CUDA backend")
    print(header("Weight-gradient sweep"))
    kernels = [v for v in pts["cuda.conv2d.wgrad"]["available"] if v != "auto"]
    shapes = [v for v in pts.get("cuda.conv2d.wgrad_wgmma", {}).get("available", []) if v != "auto"]
    layers = resnet50_layers(a.batch)
    pick = a.layers if a.layers else range(1, len(layers))
    print("| layer | count | auto ms (ran) | " + " | ".join(kernels + shapes) + " | best |")
    print("|---|---|---|" + "---|" * (len(kernels) + len(shapes) + 1))
    for i in pick:
        layer = layers[i]
        t_auto, ran = timed(device, layer, a.dtype, a.bias, {})
        cells, best = [], (t_auto if isinstance(t_auto, float) else 1e9, "auto")
        for k in kernels:
            t, _ = timed(device, layer, a.dtype, a.bias, {"cuda.conv2d.wgrad": k})
            cells.append(f"{t * 1e3:.3f}" if isinstance(t, float) else "-")
            if isinstance(t, float) and t < best[0]:
                best = (t, k)
        for s in shapes:
            t, r = timed(device, layer, a.dtype, a.bias, {"cuda.conv2d.wgrad": "wgmma", "cuda.conv2d.wgrad_wgmma": s})
            cells.append(f"{t * 1e3:.3f}" if isinstance(t, float) else "-")
            if isinstance(t, float) and t < best[0]:
                best = (t, s)
        auto = f"{t_auto * 1e3:.3f} ({ran['cuda.conv2d.wgrad']}/{ran['cuda.conv2d.wgrad_wgmma']})" \
            if isinstance(t_auto, float) else str(t_auto)[:40]
        print(f"| {layer[0]} | {layer[10]} | {auto} | " + " | ".join(cells) + f" | {best[1]} {best[0] * 1e3:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()

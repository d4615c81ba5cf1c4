#!/usr/bin/env bash
# build.sh -- builds benchmarks/cutlass/build/libgpucmp_cutlass_bench.so, the CUTLASS sm80
# baselines of benchmarks/bench_cutlass.py (a benchmark-only library: gpucmp never links it).
#
#     bash benchmarks/cutlass/build.sh                  # ARCH=90a (the H200), all configs
#     ARCH=86 bash benchmarks/cutlass/build.sh          # an RTX A4000 / A5000 build
#     ARCH="86;90a" JOBS=16 bash benchmarks/cutlass/build.sh
#     ONLY="gemm:0 conv:3" ARCH=86 bash benchmarks/cutlass/build.sh   # a few objects, no .so
#
# What it does: finds the CUTLASS 2.x headers of the `nvidia-cutlass` wheel (CUTLASS_INCLUDE,
# else the installed `cutlass_library` package, else /tmp/site/cutlass_library -- where the
# device script installs the wheel), compiles one object per config of configs.h (nvcc -c
# gemm_inst.cu / conv_inst.cu -DGCB_ID=k, JOBS of them at a time, default: every core),
# the registry, and links the .so with the static CUDA runtime and a hidden static C++
# runtime, printing how long it took. A config that fails to compile is linked as a
# stand-in that refuses every problem (stub_inst.cu), with a warning naming it: one bad
# template must not cost the whole GPU run (STRICT=1 fails the build instead).
#
# Why this way: each CUTLASS instantiation is a long compile of its own and there are
# dozens, so one translation unit per config is what makes the build parallel (nvcc -t
# only splits across architectures); objects newer than their sources are kept, so
# editing one config rebuilds one object. The static runtimes make the .so loadable next
# to torch's own CUDA runtime and libstdc++ (as setup.py does for gpucmp._core).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ARCH=${ARCH:-90a}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
NVCC=${NVCC:-nvcc}
T0=$(date +%s)

command -v "$NVCC" >/dev/null 2>&1 || { echo "build.sh: nvcc not found (set NVCC or PATH)" >&2; exit 1; }

find_cutlass() {
  if [ -n "${CUTLASS_INCLUDE:-}" ]; then echo "$CUTLASS_INCLUDE"; return; fi
  local d
  d=$(python3 -c "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); \
print(os.path.join(os.path.dirname(s.origin), 'source', 'include') if s and s.origin else '')" 2>/dev/null || true)
  if [ -n "$d" ] && [ -f "$d/cutlass/cutlass.h" ]; then echo "$d"; return; fi
  for site in ${CUTLASS_SITE:-} /tmp/site; do
    if [ -f "$site/cutlass_library/source/include/cutlass/cutlass.h" ]; then
      echo "$site/cutlass_library/source/include"; return
    fi
  done
  echo ""
}
INC=$(find_cutlass)
if [ -z "$INC" ] || [ ! -f "$INC/cutlass/cutlass.h" ]; then
  cat >&2 <<EOF
build.sh: the CUTLASS headers were not found${CUTLASS_INCLUDE:+ (CUTLASS_INCLUDE=$CUTLASS_INCLUDE has no cutlass/cutlass.h)}.
  They come with the nvidia-cutlass wheel: install it, e.g.
      pip install --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass-*.whl
  and put /tmp/site on PYTHONPATH, or point CUTLASS_INCLUDE at <site>/cutlass_library/source/include.
EOF
  exit 1
fi
VERSION=$(sed -n 's/^#define CUTLASS_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$INC/cutlass/version.h" | paste -sd. -)

GENCODE=()
TAG=""
for a in ${ARCH//[;,]/ }; do
  GENCODE+=("-gencode=arch=compute_$a,code=sm_$a")
  TAG="${TAG:+${TAG}_}$a"
done
[ ${#GENCODE[@]} -gt 0 ] || { echo "build.sh: ARCH is empty" >&2; exit 1; }
OBJ=$HERE/build/obj-$TAG
mkdir -p "$OBJ"
FLAGS=(-O3 -std=c++17 -DNDEBUG -Xcompiler -fPIC -Xcompiler -fvisibility=hidden --expt-relaxed-constexpr -I"$INC" -I"$HERE" "${GENCODE[@]}")
DEPS=("$HERE/kernels.cuh" "$HERE/entry.h" "$HERE/gcb.h" "$HERE/configs.h")

# the config ids: the first field of each X(...) line inside GCB_GEMM_CONFIGS / GCB_CONV_CONFIGS
ids() { awk -v blk="$1" '$0 ~ "define " blk "\\(X\\)" {on=1; next}
  on && /X\(/ {l = $0; sub(/.*X\( */, "", l); sub(/,.*/, "", l); print l} on && !/\\$/ {on=0}' "$HERE/configs.h"; }
JOBLIST=()
if [ -n "${ONLY:-}" ]; then
  JOBLIST=($ONLY)
else
  for i in $(ids GCB_GEMM_CONFIGS); do JOBLIST+=("gemm:$i"); done
  for i in $(ids GCB_CONV_CONFIGS); do JOBLIST+=("conv:$i"); done
fi
echo "build.sh: CUTLASS $VERSION ($INC), arch ${ARCH}, ${#JOBLIST[@]} objects, $JOBS jobs"

compile_one() {  # kind:id -> $OBJ/kind_id.o (kept when newer than its sources)
  local kind=${1%%:*} id=${1##*:}
  local src=$HERE/${kind}_inst.cu obj=$OBJ/${kind}_$id.o
  if [ -f "$obj" ]; then
    local stale=0 f
    for f in "$src" "${DEPS[@]}"; do [ "$f" -nt "$obj" ] && stale=1; done
    [ $stale = 0 ] && return 0
  fi
  local t=$(date +%s)
  if ! "$NVCC" -c "$src" -o "$obj.tmp" -DGCB_ID="$id" "${FLAGS[@]}" > "$obj.log" 2>&1; then
    echo "build.sh: FAILED $kind config $id:" >&2; tail -30 "$obj.log" >&2; rm -f "$obj.tmp" "$obj"; return 1
  fi
  mv "$obj.tmp" "$obj"; rm -f "$obj.log"
  echo "  $kind $id: $(( $(date +%s) - t )) s"
}
export -f compile_one
export NVCC OBJ HERE
export FLAGS_STR="${FLAGS[*]}"
# (bash cannot export arrays: the workers rebuild them)
worker() { FLAGS=($FLAGS_STR); DEPS=("$HERE/kernels.cuh" "$HERE/entry.h" "$HERE/gcb.h" "$HERE/configs.h"); compile_one "$1"; }
export -f worker
XRC=0
printf '%s\n' "${JOBLIST[@]}" | xargs -P "$JOBS" -I{} bash -c 'worker "$@"' _ {} || XRC=$?

if [ -n "${ONLY:-}" ]; then
  [ $XRC = 0 ] || { echo "build.sh: compilation failed" >&2; exit 1; }
  echo "build.sh: compiled ${#JOBLIST[@]} object(s) in $(( $(date +%s) - T0 )) s (ONLY set: no .so)"
  exit 0
fi
# A config that did not compile becomes a stand-in (stub_inst.cu) that refuses every problem,
# so that one bad template costs its own column, not the run (STRICT=1: fail instead).
STUBS=()
for j in "${JOBLIST[@]}"; do
  kind=${j%%:*} id=${j##*:}
  [ -f "$OBJ/${kind}_$id.o" ] && continue
  [ "${STRICT:-0}" = 1 ] && { echo "build.sh: $kind config $id failed (STRICT=1)" >&2; exit 1; }
  def=""; [ "$kind" = gemm ] && def="-DGCB_STUB_GEMM"
  "$NVCC" -c "$HERE/stub_inst.cu" -o "$OBJ/${kind}_$id.stub.o" -DGCB_ID="$id" $def "${FLAGS[@]}" || exit 1
  STUBS+=("$j")
done

"$NVCC" -c "$HERE/registry.cu" -o "$OBJ/registry.o" "${FLAGS[@]}" -DGCB_ARCH="\"sm_${ARCH//[;,]/+sm_}\"" \
  -DGCB_CUTLASS_VERSION="\"$VERSION\""
OBJS=("$OBJ/registry.o")
for j in "${JOBLIST[@]}"; do
  o="$OBJ/${j%%:*}_${j##*:}.o"; [ -f "$o" ] || o="$OBJ/${j%%:*}_${j##*:}.stub.o"; OBJS+=("$o")
done
LIB=$HERE/build/libgpucmp_cutlass_bench.so
"$NVCC" -shared -o "$LIB.tmp" "${OBJS[@]}" "${GENCODE[@]}" -cudart static \
  -Xcompiler -static-libstdc++ -Xcompiler -static-libgcc -Xlinker --exclude-libs,ALL
mv "$LIB.tmp" "$LIB"
echo "build.sh: built $LIB (${#JOBLIST[@]} configs, arch $ARCH) in $(( $(date +%s) - T0 )) s"
if [ ${#STUBS[@]} -gt 0 ]; then
  echo "build.sh: WARNING: ${#STUBS[@]} config(s) did not compile and are stand-ins that refuse every problem:" \
    "${STUBS[*]} (their errors are above and in $OBJ/*.o.log)" >&2
fi

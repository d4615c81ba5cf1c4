#!/usr/bin/env bash
# Probe of the crash seen on the H200 image: importing ml_dtypes AFTER a CUDA-built
# gpucmp._core took the process down (exit 139) when _core was linked with
# GPUCMP_STATIC_CXX=0: no libstdc++.so dependency (the image's /opt/gcc links the C++
# runtime statically) and its symbols exported. The default build hides them
# (-Wl,--exclude-libs,ALL): both orders exit 0 (2026-11-29). gpucmp/__init__.py still
# imports ml_dtypes first.
# Loads the extension directly (no package __init__, so nothing imports ml_dtypes
# first), then ml_dtypes, in a child process; prints the exit status and the libraries
# each side resolves, so the cause can be pinned down. Run after an in-place build.
set -u
so=$(ls gpucmp/_core*.so | head -1)
echo "== $so"; ldd "$so" | grep -E "stdc\+\+|gcc_s|libc\.|cuda|not found"
md=$(python3 -c "import ml_dtypes, os; print(os.path.dirname(ml_dtypes.__file__))" 2>/dev/null)
echo "== ml_dtypes at $md"; for f in "$md"/*.so; do echo "$f"; ldd "$f" | grep -E "stdc\+\+|gcc_s|not found"; done
probe() {
  timeout 60 python3 - "$so" "$1" <<'PY'
import importlib.util, sys
so, order = sys.argv[1], sys.argv[2]
def core():
    spec = importlib.util.spec_from_file_location("gpucmp._core", so)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
if order == "core-first":
    m = core(); import ml_dtypes
else:
    import ml_dtypes; m = core()
import numpy as np
print(order, "ok:", m.backends(), ml_dtypes.__version__, np.zeros(2, ml_dtypes.bfloat16))
PY
  echo "$1 exit status $?"
}
probe ml_dtypes-first 2>&1 | tail -3
probe core-first 2>&1 | tail -3
strings "$so" | grep -E "^GLIBCXX_[0-9.]+$" | sort -V | tail -2

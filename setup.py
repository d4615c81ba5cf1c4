"""setup.py -- builds gpucmp._core from csrc/.

The C core (csrc/core, csrc/cpu, csrc/python) is always compiled: -O3, OpenMP, C11,
no -march flags (SIMD is chosen at run time inside the library, so one build runs on
any x86-64). The CUDA backend (csrc/cuda/*.cu) is compiled with nvcc and linked with the
static CUDA runtime (so importing never needs libcudart or a driver):
GPUCMP_CUDA=auto (default: when nvcc is found), 1 (required; fail without nvcc) or 0
(never). GPUCMP_CUDA_ARCHS overrides the targets
(default "80;86;89;90a", plus PTX of the newest for forward compatibility). The symbols
of the static archives linked into a CUDA build stay hidden (GPUCMP_STATIC_CXX=0: not).
"""
import os
import shutil
import subprocess
import sys
from glob import glob

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def rel(*parts):
    return os.path.join("csrc", *parts)


# "auto": the CUDA backend is built wherever nvcc is found (it has run on an H200).
DEFAULT_CUDA_MODE = "auto"

C_SOURCES = sorted(glob(rel("core", "*.c")) + glob(rel("plan", "*.c")) + glob(rel("cpu", "*.c")) + glob(rel("python", "*.c")))
CU_SOURCES = sorted(glob(rel("cuda", "*.cu")))


def find_nvcc():
    nvcc = shutil.which("nvcc")
    if nvcc:
        return nvcc
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return None


def cuda_wanted():
    mode = os.environ.get("GPUCMP_CUDA", DEFAULT_CUDA_MODE).strip().lower()
    if mode not in ("auto", "0", "1"):
        sys.exit(f"GPUCMP_CUDA must be auto, 0 or 1, got {mode!r}")
    nvcc = find_nvcc()
    if mode == "0":
        return None
    if mode == "1" and (not nvcc or not CU_SOURCES):
        sys.exit("GPUCMP_CUDA=1 but nvcc or csrc/cuda sources were not found")
    if nvcc and CU_SOURCES:
        return nvcc
    return None


def arch_flags():
    archs = os.environ.get("GPUCMP_CUDA_ARCHS", "80;86;89;90a")
    flags = []
    names = [a.strip() for a in archs.replace(",", ";").split(";") if a.strip()]
    for a in names:
        flags.append(f"-gencode=arch=compute_{a},code=sm_{a}")
    newest = sorted(names, key=lambda s: int("".join(c for c in s if c.isdigit())))[-1]
    plain = "".join(c for c in newest if c.isdigit())
    flags.append(f"-gencode=arch=compute_{plain},code=compute_{plain}")
    return flags


class BuildExt(build_ext):
    """Compiles csrc/cuda/*.cu with nvcc (in parallel) before linking the extension."""

    def build_extension(self, ext):
        nvcc = cuda_wanted()
        if nvcc:
            objs = self.compile_cuda(nvcc)
            ext.extra_objects = list(ext.extra_objects or []) + objs
            ext.depends = list(ext.depends or []) + objs  # relink when only .cu changed
            ext.define_macros = list(ext.define_macros or []) + [("GPUCMP_WITH_CUDA", "1")]
            cuda_home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
            libdirs = [os.path.join(cuda_home, d) for d in ("lib64", "lib", "targets/x86_64-linux/lib")]
            ext.library_dirs = list(ext.library_dirs or []) + [d for d in libdirs if os.path.isdir(d)]
            # static runtime: importing never needs libcudart; the driver is found at run time
            ext.libraries = list(ext.libraries or []) + ["cudart_static", "dl", "rt", "pthread", "stdc++"]
            # kernel launches pass through csrc/cuda/launch_log.cu (the harness's launch log)
            ext.extra_link_args = list(ext.extra_link_args or []) + ["-Wl,--wrap=__cudaLaunchKernel"]
            if os.environ.get("GPUCMP_STATIC_CXX", "1") != "0":
                # The symbols of every static archive linked in (cudart_static, and the C++
                # runtime where the toolchain links it statically, as on the H200 image's
                # /opt/gcc) stay hidden inside _core. Exported, they clashed with the
                # system libstdc++ of extensions imported later (ml_dtypes: a segfault,
                # tests/cuda/probe_ml_dtypes.sh, 2026-11-29); hidden, both import orders
                # work. GPUCMP_STATIC_CXX=0 links as before.
                ext.extra_link_args = list(ext.extra_link_args or []) + [
                    "-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL"]
        super().build_extension(ext)

    def compile_cuda(self, nvcc):
        out_dir = os.path.join(self.build_temp, "cuda")
        os.makedirs(out_dir, exist_ok=True)
        jobs = []
        objs = []
        for src in CU_SOURCES:
            obj = os.path.join(out_dir, os.path.basename(src) + ".o")
            objs.append(obj)
            if os.path.exists(obj) and os.path.getmtime(obj) >= max(
                os.path.getmtime(p) for p in [src] + glob(rel("cuda", "*.cuh")) + glob(rel("include", "*.h"))
            ):
                continue
            cmd = [nvcc, "-c", src, "-o", obj, "-O3", "-std=c++17", "-Xcompiler", "-fPIC",
                   "-I" + rel("include"), "-I" + rel("cuda"), "--expt-relaxed-constexpr",
                   "-DGPUCMP_LAUNCH_WRAP"] + arch_flags()
            jobs.append((src, cmd))
        max_par = max(1, int(os.environ.get("GPUCMP_NVCC_JOBS", str(os.cpu_count() or 2))))
        running = []
        for src, cmd in jobs:
            print("nvcc", src, flush=True)
            running.append((src, subprocess.Popen(cmd)))
            if len(running) >= max_par:
                self._wait(running.pop(0))
        for item in running:
            self._wait(item)
        return objs

    @staticmethod
    def _wait(item):
        src, proc = item
        if proc.wait() != 0:
            sys.exit(f"nvcc failed on {src}")


compile_args = ["-O3", "-std=c11", "-fopenmp", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-pragmas"]
link_args = ["-fopenmp"]

core = Extension(
    "gpucmp._core",
    sources=C_SOURCES,
    include_dirs=[rel("include"), rel("cpu"), numpy.get_include()],
    depends=sorted(glob(rel("include", "*.h")) + glob(rel("cpu", "*.h")) + glob(rel("cpu", "*.inc")) +
                   glob(rel("python", "*.h"))),
    extra_compile_args=compile_args,
    extra_link_args=link_args,
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildExt})

"""Builds jaxsel's native CPU kernels (`jaxsel/_src/native/csrc/*.cc`, XLA FFI handlers) when
the package is installed (`pip install .` or `pip install -e .`).

One shared library per x86-64 instruction-set level (`x86-64-v4`: AVX-512; `x86-64-v3`:
AVX2/FMA; a baseline), so a wheel runs on any CPU of its architecture and each CPU gets the
best code it can run (`jaxsel._src.native` picks at import); other architectures build the
baseline only. The FFI headers are jaxlib's, found by `jax.ffi.include_dir()` (jax and
jaxlib are build requirements). Every library is an optional extension: without a C++
compiler the install still succeeds, and jaxsel runs its XLA path and says so once.
"""

import os
import platform

from setuptools import Extension, setup

CSRC = os.path.join("jaxsel", "_src", "native", "csrc")
SOURCES = [os.path.join(CSRC, name) for name in ("greedy.cc", "symmetry.cc", "attention.cc")]
# The headers the sources include (a change rebuilds the libraries).
HEADERS = [os.path.join(CSRC, name) for name in sorted(os.listdir(CSRC)) if name.endswith(".h")]
# -ffp-contract=off: expressions are rounded as written (no fused multiply-adds the compiler
# picks for one inlined copy of the code and not for another), so a gain is the same bits in
# every code path and CPU variant, and NumPy's; the kernels ask for an FMA where they want one.
FLAGS = ["-O3", "-std=c++17", "-fopenmp-simd", "-fno-math-errno", "-ffp-contract=off"]


def ffi_include_dir():
  """The XLA FFI headers (`xla/ffi/api/ffi.h`) that jaxlib ships, where JAX says they are
  (`jax.ffi.include_dir()`); None when jax is not importable here (a build without the
  build requirements, `--no-build-isolation` in an environment without jax)."""
  try:
    import jax.ffi
  except ImportError:
    return None
  return jax.ffi.include_dir()


def variants():
  if platform.machine().lower() in ("x86_64", "amd64"):
    return {"x86_64_v4": ["-march=x86-64-v4", "-mtune=generic"],
            "x86_64_v3": ["-march=x86-64-v3", "-mtune=generic"],
            "generic": []}
  return {"generic": []}


def extensions():
  include = ffi_include_dir()
  if include is None:
    print("jaxsel: jax is not importable at build time, so jaxlib's FFI headers are not found; "
          "the native kernels are not built (jaxsel uses its XLA path).")
    return []
  return [Extension(f"jaxsel._src.native._kernels_{name}", sources=SOURCES,
                    include_dirs=[CSRC, include], extra_compile_args=FLAGS + march,
                    depends=HEADERS, language="c++", optional=True)
          for name, march in variants().items()]


# The libraries compile in parallel, one per core (each is three C++ files at -O3).
setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})

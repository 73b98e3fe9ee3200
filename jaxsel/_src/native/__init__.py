"""Native CPU kernels: C++ XLA FFI handlers (`csrc/`), built when jaxsel is installed.

XLA:CPU runs a few of jaxsel's hot loops poorly (greedy's gain reduction is a single-threaded
reduce fusion; each greedy step is a dozen small XLA ops; attention over short, packed
sequences). For those, `setup.py` compiles `csrc/*.cc` against the FFI headers of jaxlib into
one shared library per x86-64 instruction-set level (`x86-64-v4` with AVX-512, `x86-64-v3`
with AVX2/FMA, and a baseline), never `-march=native`, so an installed wheel runs on any
CPU of its architecture. At import the best library this CPU can run is loaded and its
handlers are registered with XLA for the CPU platform; nothing is compiled at run time.

Where the libraries were not built (no C++ compiler at install time, or a source tree used
without installing), jaxsel runs its pure-XLA code (same picks) and says so in one log line
the first time a kernel would have served (logger `jaxsel`). Which path runs is a static
argument at the API boundary: `backend="auto"` (the kernels where they apply), `"native"`
(an error if they are unavailable) or `"xla"`. `JAXSEL_NATIVE=0` in the environment, read
once at import, makes `"auto"` mean `"xla"`; `JAXSEL_NATIVE_VARIANT` picks one library.
`status()` says what was loaded.

This package only builds (`csrc/`, compiled by `setup.py`), loads and chooses; it imports
nothing above it. Each kernel's JAX wrapper (its `ffi_call`, its `custom_vjp`, whose backward
pass differentiates the XLA reference, and `applies`) sits beside that reference:
`objectives/cover_kernel.py` (next to `objectives/rows.py`) and `encoders/attention_kernel.py`
(next to `encoders/attention.py`), as in JAX's own FFI example.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import weakref
from pathlib import Path
from typing import Optional

import jax
import numpy as np

from jaxsel._src import checks
from jaxsel._src.base import BACKENDS

log = logging.getLogger("jaxsel")

_HERE = Path(__file__).parent
# Library variants, best first, and the CPU flags (Linux /proc/cpuinfo names) each needs.
VARIANTS = ("x86_64_v4", "x86_64_v3", "generic")
_V3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"}
_NEEDS = {"x86_64_v4": _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
          "x86_64_v3": _V3, "generic": set()}
# XLA target name -> exported handler symbol, for every kernel in the library.
TARGETS = {
    "jaxsel_cover_gains": "JaxselCoverGains",
    "jaxsel_cover_greedy": "JaxselCoverGreedy",
    "jaxsel_symmetry_check": "JaxselSymmetryCheck",
    "jaxsel_attention": "JaxselAttention",
}

ENABLED = os.environ.get("JAXSEL_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")
# `JAXSEL_NATIVE_VARIANT=generic` (or another of VARIANTS), read once at import, loads that
# library only (still never one this CPU cannot run): to compare the variants' picks.
VARIANT = os.environ.get("JAXSEL_NATIVE_VARIANT", "").strip().lower() or None


def library_path(variant: str) -> Optional[Path]:
  """The built library of `variant` next to this module (any Python ABI suffix), or None."""
  found = sorted(_HERE.glob(f"_kernels_{variant}*.so")) + sorted(_HERE.glob(f"_kernels_{variant}*.pyd"))
  return found[0] if found else None


def _cpu_flags() -> set:
  """This CPU's feature flags (empty where /proc/cpuinfo does not exist: baseline only)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("flags"):
          return set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return set()


def _load() -> tuple[Optional[ctypes.CDLL], str]:
  """(the best library this CPU runs, with its handlers registered; or None, and why)."""
  if not ENABLED:
    return None, "turned off by JAXSEL_NATIVE=0"
  variants = VARIANTS if platform.machine().lower() in ("x86_64", "amd64") else ("generic",)
  if VARIANT is not None:
    if VARIANT not in variants:
      return None, f"JAXSEL_NATIVE_VARIANT={VARIANT!r} is not one of {variants}"
    variants = (VARIANT,)
  flags = _cpu_flags()
  missing = []
  for variant in variants:
    path = library_path(variant)
    if path is None:
      missing.append(variant)
      continue
    if not _NEEDS[variant] <= flags:
      if VARIANT is not None:
        return None, f"JAXSEL_NATIVE_VARIANT={VARIANT}: this CPU cannot run {path.name}"
      continue  # never load code this CPU cannot run
    try:
      lib = ctypes.CDLL(str(path))
      for target, symbol in TARGETS.items():
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    except (OSError, AttributeError) as e:
      return None, f"{path.name} failed to load: {e}"
    return lib, f"loaded {path.name}"
  if missing and len(missing) == len(variants):
    return None, ("not built: jaxsel was not installed with a C++ compiler (reinstall with "
                  "`pip install -e .` where `c++` is available)")
  return None, "no built variant runs on this CPU"


_LIB, _STATUS = _load()
_warned = False


def available() -> bool:
  """Whether the kernels are loaded (built, supported by this CPU, not turned off)."""
  return _LIB is not None


def status() -> str:
  """What happened at import: which library was loaded, or why none was."""
  return _STATUS


def check_backend(backend: str) -> str:
  """Validates a `backend` argument at the API boundary (before anything is traced)."""
  checks.choice(backend, "backend", BACKENDS)
  if backend == "native" and not available():
    raise ValueError(f"`backend='native'` but the native kernels are unavailable ({_STATUS}); "
                     "use backend='auto' or 'xla'.")
  return backend


def wanted(backend: str) -> bool:
  """Whether `backend` asks for the kernels where they apply; logs once when "auto" would
  have used them but they are unavailable (on the CPU backend only)."""
  global _warned
  if backend == "xla":
    return False
  if not available():
    if not _warned and ENABLED and jax.default_backend() == "cpu":
      _warned = True
      log.warning("jaxsel: native CPU kernels unavailable, using the XLA path (%s)", _STATUS)
    return False
  return True


def host_function(name: str, restype=ctypes.c_uint64, argtypes=()):
  """The library's plain C function `name` (called through ctypes, on host memory, outside
  XLA), with its types set; the kernels must be loaded (`available()`)."""
  fn = getattr(_LIB, name)
  fn.restype, fn.argtypes = restype, list(argtypes)
  return fn


def host_threads() -> int:
  """Threads a host function may run on: the CPUs this process may use."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except (AttributeError, OSError):
    return max(1, os.cpu_count() or 1)


class _Lent:
  """A buffer lent by the scratch cache, seen by NumPy through `__array_interface__`: every
  array viewing it holds this object, whose finalizer gives the buffer back."""

  def __init__(self, ptr: int, nbytes: int, shape: tuple, dtype: np.dtype):
    self.__array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": dtype.str,
                                "version": 3}
    weakref.finalize(self, _give, ptr, nbytes)


def _give(ptr: int, nbytes: int) -> None:
  host_function("JaxselScratchGive", None, (ctypes.c_void_p, ctypes.c_uint64))(ptr, nbytes)


def host_buffer(shape, dtype) -> Optional[np.ndarray]:
  """An uninitialised C-ordered NumPy array of `shape` and `dtype` in 64-byte aligned memory
  (which `jax.device_put` on the CPU shares instead of copying) from the kernels' scratch cache
  (`csrc/scratch.h`): the memory goes back to the cache when the last array viewing it, and
  a jax.Array sharing it, are gone, so the next copy of that size reuses pages already in
  memory instead of faulting in fresh ones. None without the kernels, for no bytes, or where
  the memory cannot be had."""
  dtype = np.dtype(dtype)
  shape = tuple(int(d) for d in shape)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if _LIB is None or nbytes == 0:
    return None
  ptr = host_function("JaxselScratchTake", ctypes.c_void_p, (ctypes.c_uint64,))(nbytes)
  if not ptr:
    return None
  return np.asarray(_Lent(ptr, nbytes, shape, dtype))


def clear_scratch() -> int:
  """Frees the scratch the kernels keep between calls (`csrc/scratch.h`: a lazy float32
  problem's byte bounds, N·N bytes, and the aligned copies of callers' host matrices
  (`host_buffer`), kept for the next call of the same size); returns the bytes freed (0
  without the kernels)."""
  if _LIB is None:
    return 0
  return int(host_function("JaxselScratchConfigure", argtypes=(ctypes.c_int32, ctypes.c_uint64))(
      1, scratch_limit()))


def scratch_limit(limit: Optional[int] = None) -> int:
  """The most bytes of scratch the kernels keep idle between calls (1 GiB unless set); with
  `limit`, sets it first (idle buffers beyond it are freed; 0 keeps none)."""
  if _LIB is None:
    return 0
  if limit is not None:
    limit = checks.integer(limit, "limit", low=0, what=" (bytes)")
    host_function("JaxselScratchConfigure", argtypes=(ctypes.c_int32, ctypes.c_uint64))(0, limit)
  return int(host_function("JaxselScratchLimit")())


def scratch_idle_bytes() -> int:
  """The bytes of scratch kept idle now (0 without the kernels)."""
  return 0 if _LIB is None else int(host_function("JaxselScratchIdleBytes")())


def explicitly_sharded(x) -> bool:
  """Whether `x` lives on a mesh with explicit axes (`jax.sharding.AxisType.Explicit`), where
  a custom call would gather the batch onto one device; the XLA path keeps it sharded."""
  mesh = getattr(getattr(jax.typeof(x), "sharding", None), "mesh", None)
  return jax.sharding.AxisType.Explicit in tuple(getattr(mesh, "axis_types", None) or ())

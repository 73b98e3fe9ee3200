"""Host and device memory: how much the default device can still allocate, a check that an
array will fit before it is allocated (XLA:CPU aborts the process instead of raising), and
aligned host buffers that `jax.device_put` shares instead of copying.
"""

from __future__ import annotations

import os
from typing import Optional

import jax
import numpy as np


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
  """An uninitialised host array whose data starts on an `align`-byte boundary: `jax.device_put`
  of such an array on the CPU backend shares its memory instead of copying it."""
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  raw = np.empty(nbytes + align, np.uint8)
  start = (-raw.ctypes.data) % align
  return raw[start:start + nbytes].view(dtype).reshape(shape)


def available_bytes() -> Optional[int]:
  """Memory the default device can still allocate: free device memory on an accelerator
  (`memory_stats`), `MemAvailable` of the host on the CPU backend; None when unknown."""
  dev = jax.devices()[0]
  if dev.platform != "cpu":
    stats = dev.memory_stats() or {}
    if "bytes_limit" in stats:
      return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return None
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  try:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    return None


def check_fits(shape, dtype, copies: int, what: str) -> None:
  """Raises `MemoryError` before allocating `copies` arrays of `shape` and `dtype` that cannot
  fit, naming the size and the objectives that need no `[N, N]` matrix. (XLA:CPU aborts the
  whole process on such an allocation instead of raising.)"""
  need = copies * int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize
  if need < 1 << 30:  # below 1 GiB: not worth a system call
    return
  free = available_bytes()
  if free is not None and need > free:
    raise MemoryError(
        f"{what} of shape {tuple(shape)} needs about {need / 2**30:.1f} GiB "
        f"({copies} × {np.dtype(dtype).name}), but only {free / 2**30:.1f} GiB is free. For large "
        "ground sets use the objectives without an [N, N] matrix: "
        "`jaxsel.facility_location_from_embeddings` / `saturated_coverage_from_embeddings` "
        "(matrix-free) or `jaxsel.knn_facility_location` / `knn_saturated_coverage` (sparse).")

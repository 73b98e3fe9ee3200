"""Host and device memory: how much the default device can still allocate, a check that an
array will fit before it is allocated (XLA:CPU aborts the process instead of raising), and
aligned host buffers that `jax.device_put` shares instead of copying, large ones recycled.
"""

from __future__ import annotations

import collections
import mmap
import os
import threading
from typing import Optional

import jax
import numpy as np


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
  """An uninitialised host array whose data starts on an `align`-byte boundary: `jax.device_put`
  of such an array on the CPU backend shares its memory instead of copying it. From
  `RECYCLE_FROM_BYTES` on (Linux) its memory is a recycled mapping (`_Recycler`)."""
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if nbytes >= RECYCLE_FROM_BYTES and recycler.works and mmap.PAGESIZE % align == 0:
    try:
      return recycler.take(shape, dtype, nbytes)
    except OSError:  # no mapping to be had: NumPy's allocation says why (MemoryError)
      pass
  raw = np.empty(nbytes + align, np.uint8)
  start = (-raw.ctypes.data) % align
  return raw[start:start + nbytes].view(dtype).reshape(shape)


# Host arrays of at least this many bytes come from `_Recycler` (where it works).
RECYCLE_FROM_BYTES = 16 << 20


class _Lease:
  """The owner of one array over a recycled mapping (`np.asarray` of it views the mapping, with
  this object as the array's base): once the last array or `jax.Array` using it is gone, its
  `__del__` hands the mapping back."""

  def __init__(self, region: tuple, shape, dtype: np.dtype):
    self._region = region  # (the mapping, a uint8 array over it)
    self.__array_interface__ = {"shape": tuple(int(d) for d in shape), "typestr": dtype.str,
                                "data": (region[1].ctypes.data, False), "version": 3}

  def __del__(self):
    try:
      recycler.give_back(self._region)
    except Exception:  # interpreter shutdown: the mapping is simply unmapped
      pass


class _Recycler:
  """Large host buffers (the candidate-major copies of `[N, N]` similarities) as anonymous
  mappings kept for the next buffer of about their size once their arrays are gone, instead of
  being unmapped: a fresh mapping's pages are faulted in one by one, each zeroed by the kernel
  (400 MB: 0.05 s where the memory was recently used, 0.6-1.0 s on a VM whose balloon has
  returned freed memory to the host), a kept one's are not. An idle mapping's pages are given
  back lazily (`MADV_FREE`): the kernel reclaims them under memory pressure instead of
  swapping, and until then the next buffer writes into them without a fault. At most
  `max_idle_bytes` (an eighth of the host's memory, at most 4 GiB) are kept idle, oldest unmapped
  first; `release()` unmaps them all. Mappings are advised to use transparent huge pages, as
  NumPy advises its own large arrays.

  A mapping handed back (`give_back`, from a `__del__`, so possibly from the garbage collector
  inside `take` on the same thread) is only queued; whoever holds the lock, or next takes it,
  files the queue, so a `__del__` never waits for the lock."""

  def __init__(self):
    self.works = hasattr(mmap, "MAP_ANONYMOUS") and hasattr(mmap, "MADV_FREE")
    self._lock = threading.Lock()
    self._returned: collections.deque = collections.deque()  # appends are atomic
    # id -> (the mapping, a uint8 array over it)
    self._idle: collections.OrderedDict[int, tuple] = collections.OrderedDict()
    self.idle_bytes = 0
    total = _mem_total()
    self.max_idle_bytes = min(4 << 30, (total or 8 << 30) // 8)

  def take(self, shape, dtype: np.dtype, nbytes: int) -> np.ndarray:
    size = -(-nbytes // (2 << 20)) * (2 << 20)  # whole 2 MiB pages
    region = None
    with self._lock:  # the smallest idle mapping that fits, if it is at most twice the size
      self._file_returned()
      fits = [(len(m), key) for key, (m, _) in self._idle.items() if size <= len(m) <= 2 * size]
      if fits:
        region = self._idle.pop(min(fits)[1])
        self.idle_bytes -= len(region[0])
    if region is None:
      pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
      if hasattr(mmap, "MADV_HUGEPAGE"):
        pages.madvise(mmap.MADV_HUGEPAGE)
      region = (pages, np.frombuffer(pages, np.uint8))
    return np.asarray(_Lease(region, shape, dtype))

  def give_back(self, region: tuple) -> None:
    region[0].madvise(mmap.MADV_FREE)
    self._returned.append(region)
    if self._lock.acquire(blocking=False):
      try:
        self._file_returned()
      finally:
        self._lock.release()

  def _file_returned(self) -> None:
    """Moves the queued mappings to the idle ones, oldest unmapped beyond the cap (lock held)."""
    while self._returned:
      region = self._returned.popleft()
      self._idle[id(region)] = region
      self.idle_bytes += len(region[0])
    while self.idle_bytes > self.max_idle_bytes:
      _, (old, _) = self._idle.popitem(last=False)  # unmapped when its last reference goes
      self.idle_bytes -= len(old)

  def release(self) -> None:
    """Unmaps every idle mapping."""
    with self._lock:
      self._file_returned()
      self._idle.clear()
      self.idle_bytes = 0


def _mem_total() -> Optional[int]:
  try:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    return None


recycler = _Recycler()


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

"""Input checks that run at the API boundary, before anything is traced.

Shape checks always run. Value checks (NaN, negative entries) run only on concrete
arrays: inside `jit`/`vmap` the values are tracers and cannot be inspected, so callers
who build objectives under a transform are responsible for their values.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional

import numpy as np
import jax
import jax.numpy as jnp


def is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def _check_number_dtype(dtype, name: str) -> None:
  if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer) or dtype == jnp.bool_):
    raise TypeError(f"`{name}` must hold real numbers, got dtype {dtype}.")


def _reject_non_arrays(x, name: str) -> None:
  if x is None:
    raise TypeError(f"`{name}` is None; pass an array.")
  if isinstance(x, (str, bytes)):
    raise TypeError(f"`{name}` must be an array of numbers, got {type(x).__name__}.")


def as_float_array(x, name: str) -> jax.Array:
  _reject_non_arrays(x, name)
  try:
    arr = jnp.asarray(x)
  except TypeError as e:
    raise TypeError(f"`{name}` must be an array of numbers: {e}") from None
  _check_number_dtype(arr.dtype, name)
  if not jnp.issubdtype(arr.dtype, jnp.floating):
    arr = arr.astype(jnp.float32)
  return arr


def as_host_float32(x, name: str) -> np.ndarray:
  """`x` as a finite float32 NumPy array, checked on the host (no device copy, nothing compiled:
  for arrays a caller hands over to be padded and batched, such as precomputed embeddings)."""
  _reject_non_arrays(x, name)
  try:
    arr = np.asarray(x)
  except (TypeError, ValueError) as e:
    raise TypeError(f"`{name}` must be an array of numbers: {e}") from None
  _check_number_dtype(arr.dtype, name)
  arr = arr.astype(np.float32, copy=False)
  check_finite(arr, name)
  return arr


def host_float_dtype(x: np.ndarray, name: str) -> np.dtype:
  """The float dtype a host (NumPy) array becomes on the device, as `as_float_array` would
  make it (float64 stays float64 only with `jax_enable_x64`), without copying it."""
  _reject_non_arrays(x, name)
  _check_number_dtype(x.dtype, name)
  dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else np.dtype(np.float32)
  return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
  """An uninitialised host array whose data starts on an `align`-byte boundary: `jax.device_put`
  of such an array on the CPU backend shares its memory instead of copying it."""
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  raw = np.empty(nbytes + align, np.uint8)
  start = (-raw.ctypes.data) % align
  return raw[start:start + nbytes].view(dtype).reshape(shape)


def min_max_ok(x, low=-np.inf) -> bool:
  """Fast path without temporaries: min/max propagate NaN, so finite extremes >= `low`
  mean every entry is finite and >= `low`."""
  a = np.asarray(x)
  lo, hi = a.min(), a.max()
  return bool(np.isfinite(lo) & np.isfinite(hi) & (lo >= low))


def check_finite(x: jax.Array, name: str) -> None:
  if is_concrete(x) and x.size and not min_max_ok(x) and not bool(np.isfinite(np.asarray(x)).all()):
    bad = int((~np.isfinite(np.asarray(x))).sum())
    raise ValueError(
        f"`{name}` contains {bad} NaN or infinite value(s); clean or mask them "
        "(padded candidates belong in `valid`, not in NaN entries).")


def check_nonnegative(x: jax.Array, name: str, fix: str) -> None:
  if is_concrete(x) and x.size and not min_max_ok(x, 0) and bool((np.asarray(x) < 0).any()):
    raise ValueError(
        f"`{name}` has negative entries (min {float(np.asarray(x).min()):.4g}); "
        f"the objective is only monotone submodular for non-negative values. {fix}")


def check_valid(valid, n: int, name: str = "valid", batch_shape=()) -> jax.Array:
  if valid is None:
    return jnp.ones(batch_shape + (n,), bool)
  v = jnp.asarray(valid)
  if v.dtype != jnp.bool_:
    raise TypeError(f"`{name}` must be a bool mask of shape {batch_shape + (n,)}, got dtype {v.dtype}.")
  if v.shape != batch_shape + (n,):
    raise ValueError(f"`{name}` must have shape {batch_shape + (n,)} (one flag per candidate), got {v.shape}.")
  return v


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


# ----------------------------------------------------------------------------- texts


def check_unicode(text: str, name: str) -> None:
  """A lone surrogate (from bytes decoded with errors='surrogateescape', or a broken JSON
  escape) is not Unicode: tokenizers fail on it with an obscure error, so name it here."""
  if text.isascii():
    return
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    raise ValueError(
        f"`{name}` is not valid Unicode: it holds a lone surrogate {text[e.start]!r} at character "
        f"{e.start}. Read the file with errors='replace' (open(path, encoding='utf-8', "
        f"errors='replace')), or clean the string: s.encode('utf-8', 'replace').decode('utf-8')."
    ) from None


def check_texts(texts, name: str = "texts", *, allow_empty: bool = True) -> list:
  """`texts` as a list of valid Unicode strings; a single str, None, non-strings and (unless
  `allow_empty`) an empty list are errors naming `name`."""
  if isinstance(texts, str):
    raise TypeError(f"`{name}` must be a list of strings, not one string (a single str); wrap "
                    f"it: [{name}].")
  if texts is None or not isinstance(texts, Iterable):
    raise TypeError(f"`{name}` must be a list of strings, got {type(texts).__name__}.")
  texts = list(texts)
  if not texts and not allow_empty:
    raise ValueError(f"`{name}` is empty; pass at least one string.")
  for i, t in enumerate(texts):
    if not isinstance(t, str):
      raise TypeError(f"`{name}[{i}]` must be a str, got {type(t).__name__} (item {i} of `{name}`).")
    check_unicode(t, f"{name}[{i}]")
  return texts


# ----------------------------------------------------------------------------- static settings


def static_bool(x, name: str) -> bool:
  """A Python bool (or NumPy bool) setting that fixes what is compiled."""
  if not isinstance(x, (bool, np.bool_)):
    raise TypeError(f"`{name}` must be a Python bool (it is static), got {x!r}.")
  return bool(x)


def static_int(x, name: str, low: int = 0, high: Optional[int] = None, *, what: str = "it is static") -> int:
  """A Python int in [low, high] (a setting that fixes shapes or the compiled program)."""
  if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
    raise TypeError(f"`{name}` must be a Python int ({what}), got {x!r}.")
  if x < low or (high is not None and x > high):
    bound = f"at least {low}" if high is None else f"between {low} and {high}"
    raise ValueError(f"`{name}` must be {bound}, got {x}.")
  return int(x)

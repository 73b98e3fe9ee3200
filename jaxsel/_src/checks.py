"""Input checks that run at the API boundary, before anything is traced: arrays (numbers,
finite, non-negative, masks), texts, and the one vocabulary of settings (`choice`, `integer`,
`number`, `costs_and_budget`, `token_budget`, `static_int`, `static_bool`), and `fits`, which
refuses work whose arrays cannot fit before they are allocated.

Shape checks always run. Value checks (NaN, negative entries) run only on concrete
arrays: inside `jit`/`vmap` the values are tracers and cannot be inspected, so callers
who build objectives under a transform are responsible for their values.
"""

from __future__ import annotations

import importlib
import math
import os
from typing import Iterable, Optional

import numpy as np
import jax
import jax.numpy as jnp


def optional_module(name: str, *, feature: str, extra: str):
  """Imports the optional module `name`, or raises an ImportError naming the `extra` that
  installs it (``pip install "jaxsel[extra]"``) and the `feature` that needs it."""
  try:
    return importlib.import_module(name)
  except ImportError:
    raise ImportError(f"{feature} needs {name.split('.')[0]!r}, which a plain `pip install jaxsel` "
                      f'leaves out: pip install "jaxsel[{extra}]"') from None


def is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def any_traced(tree) -> bool:
  """Whether any leaf of `tree` is a tracer (the call is inside a `jit`/`vmap` trace)."""
  return any(not is_concrete(x) for x in jax.tree.leaves(tree))


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


# ----------------------------------------------------------------------------- settings
# The one vocabulary of setting checks: a rule is written once here and every module states
# its settings with it, so the same rule raises the same message everywhere.


def choice(value, name: str, options, *, hint: str = ""):
  """`value` when it is one of `options`; else "Unknown `name` ...; use one of ..." (ValueError)."""
  try:
    known = value in options
  except TypeError:  # an unhashable value tested against a set or a dict
    known = False
  if not known:
    raise ValueError(
        f"Unknown `{name}` {value!r}; use one of {', '.join(map(repr, options))}{hint}.")
  return value


def integer(x, name: str, *, low: int = 1, high: Optional[int] = None, what: str = "",
            none: bool = False) -> Optional[int]:
  """`x` as an int in [low, high] (a positive int by default; bools and floats are not ints),
  or None when `none` allows it. `what` says what it counts (" (the embedding dimension)")."""
  if x is None and none:
    return None
  if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < low or (
      high is not None and x > high):
    kind = (f"an int in [{low}, {high}]" if high is not None else
            "a positive int" if low == 1 else f"an int >= {low}")
    raise ValueError(f"`{name}` must be {kind}{what}{' or None' if none else ''}, got {x!r}.")
  return int(x)


def number(x, name: str, low: float = -math.inf, high: float = math.inf, *,
           low_open: bool = False) -> float:
  """`x` as a finite real number in [low, high] (`(low, high]` with `low_open`); bools are not
  numbers."""
  if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
      or not math.isfinite(x) or x < low or (low_open and x == low) or x > high:
    bound = f"in ({low}, {high}]" if low_open else f"in [{low}, {high}]"
    raise ValueError(f"`{name}` must be a finite number {bound}, got {x!r}.")
  return float(x)


def costs_and_budget(costs, budget, n: Optional[int] = None, *, batch: str):
  """Token costs `[N]` and a budget `[]` as float32 device arrays: shapes always (`n` when
  given), values where concrete (finite, non-negative). `batch` says how a batch is passed
  (in the shape errors). Returns `(costs, budget)`."""
  costs = as_float_array(costs, "costs").astype(jnp.float32)
  if costs.ndim != 1 or (n is not None and costs.shape != (n,)):
    want = "[N]" if n is None else f"[N] = [{n}]"
    raise ValueError(f"`costs` must have shape {want} ({batch}), got {costs.shape}.")
  check_finite(costs, "costs")
  if is_concrete(costs) and bool((np.asarray(costs) < 0).any()):
    raise ValueError("`costs` must be non-negative (a cost is e.g. a token count).")
  budget = as_float_array(budget, "budget").astype(jnp.float32)
  if budget.ndim != 0:
    raise ValueError(f"`budget` must be a scalar ({batch}), got shape {budget.shape}.")
  if is_concrete(budget):
    b = np.asarray(budget)
    if not np.isfinite(b) or b < 0:
      raise ValueError(f"`budget` must be a finite non-negative number, got {b}.")
  return costs, budget


def token_budget(budget, *, low: float = 0, whole: bool = False, none: str = "") -> Optional[float]:
  """A budget given as a plain number of tokens (None passes when `none` says what it means):
  finite and at least `low`, a whole number when `whole`."""
  if budget is None and none:
    return None
  if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer, np.floating)) \
      or not math.isfinite(budget) or budget < low or (whole and not float(budget).is_integer()):
    kind = "a whole number" if whole else "a finite number"
    raise ValueError(f"`budget` must be {kind} of tokens >= {low:g}"
                     f"{f' (or None: {none})' if none else ''}, got {budget!r}.")
  return budget


def _size(nbytes: float) -> str:
  for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
    if nbytes >= 1 << shift:
      return f"{nbytes / 2**shift:,.1f} {unit}"
  return f"{nbytes:,.0f} bytes"


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


def shortfall(need_bytes: float) -> Optional[int]:
  """The free memory (`available_bytes`) when `need_bytes` cannot fit in it, else None: below
  1 GiB, or where the free memory is unknown, nothing is asked of the system."""
  if need_bytes < 1 << 30:  # not worth a system call
    return None
  free = available_bytes()
  return free if free is not None and need_bytes > free else None


def fits(need_bytes: float, name: str, value, *, what: str, fix: str) -> None:
  """Raises a ValueError before allocating `need_bytes` for `what` that cannot fit in the memory
  the default device can still allocate (`available_bytes`: free device memory, or the
  host's available memory on the CPU), naming the argument `name` (which is `value`), the size
  and `fix`. Below 1 GiB, or where the free memory is unknown, nothing is checked. (An
  allocation that cannot fit ends in a bare `MemoryError` after swapping, XLA's
  `RESOURCE_EXHAUSTED`, or an abort of the whole process on XLA:CPU.)"""
  free = shortfall(need_bytes)
  if free is not None:
    shown = (f"{value:,}" if isinstance(value, (int, np.integer)) and not isinstance(value, bool)
             else value if isinstance(value, str) else repr(value))  # a str: words, not a value
    raise ValueError(f"`{name}`={shown} needs about {_size(need_bytes)} for {what}, but only "
                     f"{_size(free)} is free; {fix}.")

"""Input checks that run at the API boundary, before anything is traced.

Shape checks always run. Value checks (NaN, negative entries) run only on concrete
arrays: inside `jit`/`vmap` the values are tracers and cannot be inspected, so callers
who build objectives under a transform are responsible for their values.
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp


def is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def as_float_array(x, name: str) -> jax.Array:
  if x is None:
    raise TypeError(f"`{name}` is None; pass an array.")
  if isinstance(x, (str, bytes)):
    raise TypeError(f"`{name}` must be an array of numbers, got {type(x).__name__}.")
  try:
    arr = jnp.asarray(x)
  except TypeError as e:
    raise TypeError(f"`{name}` must be an array of numbers: {e}") from None
  if not (jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)
          or arr.dtype == jnp.bool_):
    raise TypeError(f"`{name}` must hold real numbers, got dtype {arr.dtype}.")
  if not jnp.issubdtype(arr.dtype, jnp.floating):
    arr = arr.astype(jnp.float32)
  return arr


def _min_max_ok(x, low=-np.inf) -> bool:
  """Fast path without temporaries: min/max propagate NaN, so finite extremes >= `low`
  mean every entry is finite and >= `low`."""
  a = np.asarray(x)
  lo, hi = a.min(), a.max()
  return bool(np.isfinite(lo) & np.isfinite(hi) & (lo >= low))


def check_finite(x: jax.Array, name: str) -> None:
  if is_concrete(x) and x.size and not _min_max_ok(x) and not bool(np.isfinite(np.asarray(x)).all()):
    bad = int((~np.isfinite(np.asarray(x))).sum())
    raise ValueError(
        f"`{name}` contains {bad} NaN or infinite value(s); clean or mask them "
        "(padded candidates belong in `valid`, not in NaN entries).")


def check_nonnegative(x: jax.Array, name: str, fix: str) -> None:
  if is_concrete(x) and x.size and not _min_max_ok(x, 0) and bool((np.asarray(x) < 0).any()):
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

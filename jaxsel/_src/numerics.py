"""The numbers every layer agrees on: unit vectors, cosine similarity and the rule that makes
similarities non-negative (the submodular guarantee needs `s, r ≥ 0`), a fast argmax, and a
check that an `[N, N]` array fits in memory before XLA:CPU tries to allocate it.

Relevance `r_qj` and similarity `s_ij` are both `cosine_similarity` with a `nonneg` method
(default ``"clip"``): the Pipeline, the method registry, the index and the training code all
call these functions, so a score means the same everywhere.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import checks

Array = jax.Array

NONNEG_METHODS = ("clip", "shift", "minmax", "square")
# Methods that act entry by entry ("minmax" needs the whole matrix's extremes).
ELEMENTWISE_NONNEG = ("clip", "shift", "square")


# Rows whose largest entry lies outside [2^-30, 2^30] are first scaled by a power of two.
_FAR = 2.0 ** 30


def l2_normalize(x: Array, eps: float = 1e-12) -> Array:
  """Rows of `x` `[..., D]` scaled to unit length (a zero row stays zero). A row of extreme
  magnitude (largest entry above 2^30 or below 2^-30, e.g. 1e20 or 1e-30) is first scaled by a
  power of two, exactly, so its float32 norm neither overflows nor underflows; other rows are
  computed as before, bit for bit."""
  x = jnp.asarray(x)
  if jnp.issubdtype(x.dtype, jnp.floating):
    top = jnp.max(jnp.abs(x), axis=-1, keepdims=True)
    far = (top > _FAR) | ((top < 1.0 / _FAR) & (top > 0))
    power = jnp.round(jnp.log2(jnp.where(far, top, 1.0)))
    x = jnp.where(far, x * jnp.exp2(-power).astype(x.dtype), x)
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


NEGATIVE_FIX = ("Make them non-negative first: build them with `jaxsel.cosine_similarity` (clips by "
                "default), or map them with `jaxsel.contrib.nonnegative(x, method='clip')`.")


def nonnegative(x, *, method: str = "clip") -> Array:
  """Maps similarities to non-negative values, as the submodular guarantee needs.

  Methods:
    * ``"clip"`` (the default): ``max(x, 0)``. Positive similarities keep their value,
      so relevance × similarity products and saturation thresholds stay in cosine units,
      and anti-correlated items count as unrelated rather than as slightly related.
    * ``"shift"``: ``(x + 1) / 2``, maps cosines from ``[-1, 1]`` to ``[0, 1]``. Keeps the
      order of all pairs, but every pair then looks at least half similar.
    * ``"minmax"``: ``(x - min) / (max - min)`` over the whole array. Scale-free, but a value
      then depends on every other entry of the matrix.
    * ``"square"``: ``x ** 2``, the similarity apricot uses for ``metric="cosine"``.
  """
  x = jnp.asarray(x)
  if method == "clip":
    return jnp.maximum(x, 0)
  if method == "shift":
    return (x + 1) / 2
  if method == "minmax":
    lo, hi = jnp.min(x), jnp.max(x)
    return (x - lo) / jnp.where(hi > lo, hi - lo, 1)
  if method == "square":
    return x * x
  checks.choice(method, "method", NONNEG_METHODS)


def cosine_similarity(a, b=None, *, nonneg: Optional[str] = "clip", eps: float = 1e-12) -> Array:
  """Cosine similarity between the rows of `a` `[..., N, D]` and of `b` `[..., M, D]`.

  With `b=None` it is `a` against itself, `[..., N, N]`. `nonneg` is passed to
  `nonnegative` as its method (default ``"clip"``); ``None`` keeps raw cosines in ``[-1, 1]``.
  """
  a = checks.as_float_array(a, "a")
  if a.ndim < 2:
    raise ValueError(f"`a` must be [..., N, D] (rows are vectors), got shape {a.shape}.")
  checks.check_finite(a, "a")
  if b is None:
    b = a
  else:
    b = checks.as_float_array(b, "b")
    if b.ndim < 2 or b.shape[-1] != a.shape[-1]:
      raise ValueError(f"`b` must be [..., M, {a.shape[-1]}] to match `a`'s dimension, got {b.shape}.")
    checks.check_finite(b, "b")
  out_shape = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-2])
  check_fits(out_shape, jnp.result_type(a, b), 1 if nonneg is None else 2,
                    "The similarity matrix")
  sim = jnp.einsum("...nd,...md->...nm", l2_normalize(a, eps), l2_normalize(b, eps),
                   precision=lax.Precision.HIGHEST)
  return sim if nonneg is None else nonnegative(sim, method=nonneg)


def first_argmax(x: Array) -> Array:
  """`jnp.argmax` over the last axis (the lowest index of the maximum) from two plain
  reductions, which XLA:CPU runs 2–5x faster than its variadic arg-reduction."""
  top = jnp.max(x, axis=-1, keepdims=True)
  n = x.shape[-1]
  return jnp.min(jnp.where(x == top, jnp.arange(n, dtype=jnp.int32), n), axis=-1)


def check_fits(shape, dtype, copies: int, what: str) -> None:
  """Raises `MemoryError` before allocating `copies` arrays of `shape` and `dtype` that cannot
  fit, naming the size and the objectives that need no `[N, N]` matrix. (XLA:CPU aborts the
  whole process on such an allocation instead of raising.)"""
  need = copies * int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize
  free = checks.shortfall(need)
  if free is not None:
    raise MemoryError(
        f"{what} of shape {tuple(shape)} needs about {need / 2**30:.1f} GiB "
        f"({copies} × {np.dtype(dtype).name}), but only {free / 2**30:.1f} GiB is free. For large "
        "ground sets use the objectives without an [N, N] matrix: "
        "`jaxsel.facility_location_from_embeddings` / `saturated_coverage_from_embeddings` "
        "(matrix-free) or `jaxsel.knn_facility_location` / `knn_saturated_coverage` (sparse).")

"""Objectives evaluated a block of candidates at a time: the shared machinery of the
matrix-free and kNN forms, and their input checks.

Shape legend: N candidates (= items to cover), D embedding dimension, Q queries,
M a block of candidates.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import checks, pytree
from jaxsel._src.base import Objective
from jaxsel._src.numerics import ELEMENTWISE_NONNEG, NEGATIVE_FIX, l2_normalize

Array = jax.Array


def map_blocks(fn, idx: Array, block: int) -> Array:
  """`fn(idx)` evaluated on blocks of at most `block` ids (`lax.map`): peak memory is one
  block's worth of rows, not `len(idx)`'s."""
  m = idx.shape[0]
  if m <= block:
    return fn(idx)
  nb = -(-m // block)
  # Padding ids are 0, a real row; their results are dropped.
  padded = jnp.pad(idx, (0, nb * block - m)).reshape(nb, block)
  out = lax.map(fn, padded)
  return jax.tree.map(lambda x: x.reshape((nb * block,) + x.shape[2:])[:m], out)


class Blocked(Objective):
  """`num_candidates`, `gains` and `value` in terms of per-block pieces.

  Subclasses define `init`, `update`, `state_value`, `_block_gains(state, ids)` -> `[M]`
  and `_block_update(state, ids, take)`: the state after adding the candidates `ids` `[M]`
  where `take` `[M]` is true.
  """
  block: int

  @property
  def num_candidates(self) -> int:
    return self.valid.shape[-1]

  @pytree.jit_when_eager
  def gains(self, state, idx: Optional[Array] = None) -> Array:
    """Marginal gains `[N]`, or `[M]` for the candidates `idx` `[M]`."""
    if idx is None:
      idx = jnp.arange(self.num_candidates, dtype=jnp.int32)
    return map_blocks(lambda ids: self._block_gains(state, ids), idx, self.block)

  @pytree.jit_when_eager
  def value(self, selected: Array) -> Array:
    """`f` of a bool mask `[N]`; invalid candidates in the mask are ignored."""
    n = self.num_candidates
    take = jnp.asarray(selected, bool) & self.valid
    if n == 0:
      return self.state_value(self.init())
    nb = -(-n // self.block)
    ids = jnp.arange(nb * self.block, dtype=jnp.int32)
    take = jnp.pad(take, (0, nb * self.block - n)).reshape(nb, self.block)
    ids = jnp.minimum(ids, n - 1).reshape(nb, self.block)

    def body(state, blk):
      return self._block_update(state, *blk), None

    state, _ = lax.scan(body, self.init(), (ids, take))
    return self.state_value(state)


def max_state(state, new, take: Array):
  """Elementwise max of `state` and, over the rows of `new` `[M, ...]` where `take`, `new`."""
  def one(s, x):
    t = take.reshape(take.shape + (1,) * (x.ndim - 1))
    return jnp.maximum(s, jnp.max(jnp.where(t, x, 0), axis=0, initial=0))
  return jax.tree.map(one, state, new)


# ----------------------------------------------------------------------------- input checks


def check_nonneg_method(nonneg: str) -> None:
  if nonneg not in ELEMENTWISE_NONNEG:
    raise ValueError(
        f"`nonneg` must be one of {', '.join(map(repr, ELEMENTWISE_NONNEG))} for a matrix-free or "
        f"kNN objective, got {nonneg!r} ('minmax' needs the whole N×N matrix; build it "
        "densely with `jaxsel.cosine_similarity` if it fits).")


def check_block(block, name: str = "block") -> int:
  return checks.integer(block, name, what=" (candidates per block)")


def shaped_embeddings(embeddings) -> Array:
  """`embeddings` as a float array whose shape is checked to be `[N, D]`; nothing computed on it
  (so a size check can run before any work)."""
  e = checks.as_float_array(embeddings, "embeddings")
  if e.ndim != 2:
    raise ValueError(
        f"`embeddings` must be [N, D] (one row per candidate), got shape {e.shape}; for a batch "
        "build one objective per instance and stack them.")
  return e


def embeddings_shape(embeddings) -> tuple:
  """The `[N, D]` shape and dtype of `embeddings` as `unit_embeddings` will see them, read from
  a float array without converting it (so a size check can run before any work); other inputs
  are converted and checked first (the error names `embeddings`)."""
  dtype = getattr(embeddings, "dtype", None)
  if dtype is None or not jnp.issubdtype(dtype, jnp.floating) or np.ndim(embeddings) != 2:
    embeddings = shaped_embeddings(embeddings)
  return tuple(np.shape(embeddings)), embeddings.dtype


def unit_embeddings(embeddings, eps: float = 1e-12) -> Array:
  """Checked unit-norm `[N, D]` float embeddings (float32 or wider)."""
  e = shaped_embeddings(embeddings)
  checks.check_finite(e, "embeddings")
  e = e.astype(jnp.promote_types(e.dtype, jnp.float32))
  return l2_normalize(e, eps)


def checked_relevance(relevance, n: int, valid: Array, dtype, *, required: bool) -> Optional[Array]:
  if relevance is None:
    if required:
      raise TypeError("`relevance` is required: [Q, N] query–candidate relevance, or [N] for one query.")
    return None
  r = checks.as_float_array(relevance, "relevance")
  if r.ndim == 1:
    r = r[None]
  if r.ndim != 2 or r.shape[-1] != n:
    raise ValueError(f"`relevance` must be [Q, {n}] or [{n}], got shape {jnp.shape(relevance)}.")
  checks.check_finite(r, "relevance")
  checks.check_nonnegative(r, "relevance", NEGATIVE_FIX)
  return jnp.where(valid[None], r.astype(dtype), 0)

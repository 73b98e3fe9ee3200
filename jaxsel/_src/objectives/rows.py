"""Gains of candidate rows: the one definition of the coverage arithmetic, used by the XLA
path of the dense objectives (and so of the matrix-free ones) and by the derivative of the
native kernel, which computes the same sums in C++.

Shape legend: Q queries, N items, M a block of candidates.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array

# On CPU, rows at least this long are gathered into a block, shorter ones streamed
# (bench/greedy.py: the crossover was measured between 4000 and 6000).
GATHER_MIN_N = 5000


def cover_row_gains(rows: Array, r: Optional[Array], cover: Array) -> Array:
  """Facility-location gains `[M]` of candidate rows `[M, N]` with weights `r` `[Q, M]` (None:
  coverage) against `cover` `[Q, N]`: `Σ_q Σ_i relu(r_qj s_ji − cover_qi)`."""
  if r is None:
    # Reduce along the contiguous (item) axis: one streaming pass over the rows.
    return jnp.sum(jax.nn.relu(rows - cover[0]), axis=-1)
  if r.shape[0] == 1:  # one query: a plain [M, N] row reduction, which vectorises best
    return jnp.sum(jax.nn.relu(r[0][:, None] * rows - cover[0]), axis=-1)
  return jnp.sum(jax.nn.relu(r.T[:, :, None] * rows[:, None, :] - cover[None]), axis=(-2, -1))


def saturated_row_gains(rows: Array, relevance: Array, best: Array) -> Array:
  """Saturated-coverage gains `[M]` of candidate rows `[M, N]`, saturation levels `relevance`
  `[Q, N]`, current best cover `best` `[N]`: `Σ_q Σ_i relu(min(r_qi, s_ji) − min(r_qi, best_i))`."""
  capped = jnp.minimum(relevance, best[None])  # [Q, N]
  return jnp.sum(jax.nn.relu(jnp.minimum(relevance[None], rows[:, None, :]) - capped[None]),
                 axis=(-2, -1))


def block_gains(row_gains: Callable, sim_t: Array, relevance: Optional[Array], idx: Array) -> Array:
  """Gains `[M]` of the candidates `idx` `[M]` from `row_gains(rows [M, N], r [Q, M] | None)`.

  Accelerators, and CPUs for rows of at least `GATHER_MIN_N` entries, reduce a gathered
  `[M, N]` block, which XLA spreads over the cores. Shorter rows on CPU are streamed one at a
  time (`lax.map` of a dynamic row slice), which costs less than gathering them."""
  if jax.default_backend() != "cpu" or sim_t.shape[-1] >= GATHER_MIN_N:
    r = None if relevance is None else jnp.take(relevance, idx, axis=-1)
    return row_gains(jnp.take(sim_t, idx, axis=0), r)

  def one(j):
    row = lax.dynamic_index_in_dim(sim_t, j, keepdims=True)  # [1, N]
    r = None if relevance is None else lax.dynamic_index_in_dim(relevance, j, axis=-1, keepdims=True)
    return row_gains(row, r)[0]

  return lax.map(one, idx)

"""The greedy kernels of `csrc/greedy.cc` as JAX functions: facility-location gains of a
block of candidate rows (differentiable: the backward pass differentiates the XLA gains of
`objectives.rows`), and a whole dense or lazy (CELF) greedy run in one call.

Shape legend: Q queries, N candidates, M a block of candidates, K picks.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from jaxsel._src import native
from jaxsel._src.objectives import rows
from jaxsel._src.types import Selection

Array = jax.Array


def applies(sim_t: Array, backend: str) -> bool:
  """Whether the kernels serve this candidate-major matrix: `backend` allows them, they are
  loaded, the backend is the CPU, the dtype float32/64, and the array is not on a mesh with
  explicit axes (use `jaxsel.sharded_greedy` there: inside its `shard_map` each device runs
  the kernel on its own problems)."""
  return (jax.default_backend() == "cpu" and sim_t.dtype in (jnp.float32, jnp.float64)
          and native.wanted(backend) and not native.explicitly_sharded(sim_t))


def cover_gains(sim_t: Array, cover: Array, relevance: Optional[Array],
                idx: Optional[Array]) -> Array:
  """Facility-location gains of the candidate rows `idx` `[M]` (None: all) of `sim_t`
  `[N, N]` (or a block `[M, N]`), weights `relevance` `[Q, N]` (None: coverage), against
  `cover` `[Q, N]`; each row reduced on XLA's thread pool. Check `applies` first."""
  if idx is None:
    idx = jnp.arange(sim_t.shape[-2], dtype=jnp.int32)
  idx = idx.astype(jnp.int32)
  weighted = relevance is not None
  w = jnp.take(relevance, idx, axis=-1) if weighted else jnp.ones((1, idx.shape[-1]), sim_t.dtype)
  return _cover_gains(weighted, sim_t, cover.astype(sim_t.dtype), w.astype(sim_t.dtype), idx)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _cover_gains(weighted: bool, sim_t, cover, w, idx):
  call = jax.ffi.ffi_call("jaxsel_cover_gains", jax.ShapeDtypeStruct(idx.shape, sim_t.dtype),
                          vmap_method="expand_dims")
  return call(sim_t, cover, w, idx, weighted=weighted)


def _cover_gains_fwd(weighted, sim_t, cover, w, idx):
  return _cover_gains(weighted, sim_t, cover, w, idx), (sim_t, cover, w, idx)


def _cover_gains_bwd(weighted, res, g):
  sim_t, cover, w, idx = res
  _, vjp = jax.vjp(
      lambda s, c, ww: rows.cover_row_gains(jnp.take(s, idx, axis=-2), ww if weighted else None, c),
      sim_t, cover, w)
  return (*vjp(g), None)


_cover_gains.defvjp(_cover_gains_fwd, _cover_gains_bwd)


def cover_greedy(sim_t: Array, relevance: Optional[Array], valid: Array, costs: Optional[Array],
                 budget: Optional[Array], min_gain: Optional[Array], *, k: int, lazy: bool,
                 ratio: bool, saturated: bool) -> Selection:
  """Greedy on facility location / coverage (`saturated=False`) or saturated coverage as one
  C++ call: dense steps, or lazy ones (CELF with a heap), with or without costs, by the rules
  of `jaxsel.greedy`'s own loop and the same gain code as `cover_gains`, so dense and lazy
  picks agree exactly. `sim_t` `[N, N]` candidate-major, `relevance` `[Q, N]` or None."""
  n = sim_t.shape[-1]
  dtype = sim_t.dtype
  weighted = relevance is not None
  w = relevance.astype(dtype) if weighted else jnp.zeros((1, 1), dtype)
  has_costs = costs is not None
  costs = costs.astype(jnp.float32) if has_costs else jnp.zeros((n,), jnp.float32)
  budget = jnp.asarray(jnp.inf if budget is None else budget, jnp.float32)
  floor = jnp.asarray(-jnp.inf if min_gain is None else min_gain, dtype)
  call = jax.ffi.ffi_call(
      "jaxsel_cover_greedy",
      (jax.ShapeDtypeStruct((k,), jnp.int32), jax.ShapeDtypeStruct((k,), dtype),
       jax.ShapeDtypeStruct((k,), dtype), jax.ShapeDtypeStruct((), jnp.int32),
       jax.ShapeDtypeStruct((), jnp.float32)),
      vmap_method="expand_dims")
  indices, gains, values, count, cost = call(
      sim_t, w, valid, costs, budget, floor,
      weighted=weighted, lazy=lazy, has_costs=has_costs, ratio=ratio, saturated=saturated)
  return Selection(indices, gains, values, count, cost)

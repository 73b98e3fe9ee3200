"""Baselines for CORAG search, with the same inputs and the same `SearchResult` output.

Shape legend: N candidate chunks, T positions (`max_depth` / `max_size`), C combinations.

* `naive_rag`: the paper's NaiveRAG, chunks by decreasing relevance while the budget allows.
* `mmr`: maximal marginal relevance with a budget.
* `exhaustive_search`: the paper's "CORAG Upper", every ordered combination of up to
  `max_size` chunks within the budget, scored in batches: the reference optimum.

Relevance defaults to the scorer's value of each single chunk (one batched call), so all
three need nothing beyond what `corag_search` takes. Each returns `SearchResult` with
`tree=None` and `utility = value`. One instance each; `jax.vmap` over queries.

NaN or ±inf from the scorer (for a chunk's default relevance, a combination `exhaustive_search`
compares, or the result's value) sets `SearchResult.nonfinite`; called eagerly, each raises a
`ValueError` naming the scorer instead, as `corag_search` does (see `jaxsel._src.search`).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import checks, pytree
from jaxsel._src import constraints as cons_lib
from jaxsel._src.base import NO_ITEM, SearchResult
from jaxsel._src.search import check_inputs, checked, empty_order, score_all, scorer_value

Array = jax.Array

MAX_EXHAUSTIVE_SIZE = 5


def _singletons(scorer, n: int, d: int) -> Array:
  """The scorer's value of every single chunk, `[N]`."""
  orders = jnp.full((n, d), NO_ITEM, jnp.int32).at[:, 0].set(jnp.arange(n, dtype=jnp.int32))
  return score_all(scorer, orders)


def _relevance(scorer, relevance, valid: Array, d: int):
  """(relevance `[N]`, whether the scorer gave a valid chunk a NaN/inf one)."""
  if relevance is None:
    rel = _singletons(scorer, valid.shape[0], d)
    return rel, jnp.any(valid & ~jnp.isfinite(rel))
  return relevance.astype(jnp.float32), jnp.zeros((), bool)


def _check_relevance(relevance, n):
  if relevance is None:
    return None
  rel = checks.as_float_array(relevance, "relevance")
  if rel.shape != (n,):
    raise ValueError(f"`relevance` must be [N] = [{n}], got shape {rel.shape}.")
  checks.check_finite(rel, "relevance")
  return rel


def _result(scorer, order: Array, costs: Array, nonfinite: Array) -> SearchResult:
  used = order >= 0
  value = scorer_value(scorer, order)
  cost = jnp.sum(jnp.where(used, costs[jnp.where(used, order, 0)], 0))
  return SearchResult(order=order, length=jnp.sum(used).astype(jnp.int32), value=value,
                      cost=cost.astype(jnp.float32), utility=value, tree=None,
                      nonfinite=nonfinite | ~jnp.isfinite(value))


def _fill(scorer, costs, budget, valid, crit_fn, state0, update_fn, nonfinite, cons=None, *, d):
  """Budgeted greedy fill: at each step the available chunk of highest `crit_fn(state)` that
  fits (and whose group has room); stops when none fits or T chunks are in. The pinned
  (`cons`) come first, in order. `nonfinite`: the criterion's inputs were."""
  n = costs.shape[0]
  pinned, p0 = cons_lib.pinned_order(cons, d)

  def body(k, c):
    order, chosen, spent, state = c
    avail = valid & ~chosen & (spent + costs <= budget) & cons_lib.room(cons, chosen)
    crit = jnp.where(avail, crit_fn(state), -jnp.inf)
    j = jnp.where(k < p0, pinned[k], jnp.argmax(crit)).astype(jnp.int32)
    take = avail[j] | ((k < p0) & valid[j] & ~chosen[j] & (spent + costs[j] <= budget))
    order = order.at[k].set(jnp.where(take, j, NO_ITEM))
    chosen = chosen.at[j].set(chosen[j] | take)
    spent = spent + jnp.where(take, costs[j], 0)
    state = jax.tree.map(lambda a, b: jnp.where(take, a, b), update_fn(state, j), state)
    return order, chosen, spent, state

  init = (empty_order(d), jnp.zeros((n,), bool), jnp.zeros((), jnp.float32), state0)
  order, _, _, _ = lax.fori_loop(0, d, body, init)
  # A skipped step leaves a -1 gap only after which nothing fits, so `order` is compact.
  return _result(scorer, order, costs, nonfinite)


@pytree.jit_static_leaves(static_argnames=("max_depth",))
def _naive_rag(scorer, costs, budget, valid, relevance, cons, *, max_depth):
  rel, bad = _relevance(scorer, relevance, valid, max_depth)
  return _fill(scorer, costs, budget, valid, lambda _: rel, jnp.zeros(()), lambda s, j: s, bad,
               cons, d=max_depth)


def naive_rag(scorer, costs, *, budget, max_depth: Optional[int] = None, valid=None,
              relevance=None, pinned=None, groups=None, max_per_group=None) -> SearchResult:
  """NaiveRAG: chunks by decreasing relevance (ties to the lower index); a chunk that no longer
  fits is skipped and the next one tried, until none fits or `max_depth` are in.

  `relevance` `[N]` defaults to the scorer's value of each single chunk. `value` is the
  scorer's value of the resulting order.

  Raises `ValueError` when called eagerly and the scorer gave NaN or ±inf (a valid chunk's
  default relevance, or the result's value); under `jit` / `vmap` the result carries
  `nonfinite = True` instead, for the caller to check (see `corag_search`).

  `pinned`, `groups`, `max_per_group` as in `jaxsel.greedy` (`max_depth` in place of k): the
  pinned come first, in order, and a chunk whose group is full is skipped.
  """
  costs, budget, valid, max_depth = check_inputs(scorer, costs, budget, valid, max_depth)
  relevance = _check_relevance(relevance, costs.shape[0])
  cons = _constraints(pinned, groups, max_per_group, costs, budget, valid, max_depth)
  return checked(_naive_rag(scorer, costs, budget, valid, relevance, cons, max_depth=max_depth),
                 scorer, what="naive_rag")


def _constraints(pinned, groups, max_per_group, costs, budget, valid, max_depth):
  return cons_lib.check(pinned, groups, max_per_group, n=costs.shape[0], k=max_depth, costs=costs,
                        budget=budget, valid=valid)


@pytree.jit_static_leaves(static_argnames=("max_depth",))
def _mmr(scorer, costs, budget, valid, similarity, relevance, diversity, cons, *, max_depth):
  rel, bad = _relevance(scorer, relevance, valid, max_depth)
  # state: max similarity of each candidate to the chosen set (-inf for the empty set). The
  # running max over every chosen item is exactly max_{s∈S} sim(j, s).
  state0 = jnp.full(costs.shape, -jnp.inf, jnp.float32)

  def crit(maxsim):
    red = jnp.where(jnp.isfinite(maxsim), maxsim, 0)
    return (1 - diversity) * rel - diversity * red

  return _fill(scorer, costs, budget, valid, crit, state0,
               lambda s, j: jnp.maximum(s, similarity[:, j]), bad, cons, d=max_depth)


def mmr(scorer, costs, *, budget, similarity, diversity=0.5, max_depth: Optional[int] = None,
        valid=None, relevance=None, pinned=None, groups=None, max_per_group=None) -> SearchResult:
  """Maximal marginal relevance with a budget: next is the fitting chunk maximising
  `(1 − diversity) · relevance[j] − diversity · max_{s ∈ chosen} similarity[j, s]`
  (the maximum over **every** chosen chunk; 0 before the first pick).

  Args:
    similarity: `[N, N]` chunk–chunk similarity (e.g. cosine).
    diversity: in [0, 1]; 0 is NaiveRAG's order.
    relevance: `[N]`, default the scorer's value of each single chunk.

  NaN or ±inf from the scorer: as in `naive_rag` (eagerly a `ValueError`, else `nonfinite`).
  `pinned`, `groups`, `max_per_group`: as in `naive_rag`.
  """
  costs, budget, valid, max_depth = check_inputs(scorer, costs, budget, valid, max_depth)
  n = costs.shape[0]
  relevance = _check_relevance(relevance, n)
  sim = checks.as_float_array(similarity, "similarity").astype(jnp.float32)
  if sim.shape != (n, n):
    raise ValueError(f"`similarity` must be [N, N] = [{n}, {n}], got shape {sim.shape}.")
  checks.check_finite(sim, "similarity")
  div = checks.as_float_array(diversity, "diversity").astype(jnp.float32)
  if checks.is_concrete(div) and not 0 <= float(div) <= 1:
    raise ValueError(f"`diversity` must lie in [0, 1], got {float(div)}.")
  cons = _constraints(pinned, groups, max_per_group, costs, budget, valid, max_depth)
  return checked(_mmr(scorer, costs, budget, valid, sim, relevance, div, cons, max_depth=max_depth),
                 scorer, what="mmr")


@functools.lru_cache(maxsize=16)
def ordered_combinations(n: int, max_size: int) -> np.ndarray:
  """Every ordered combination of 1…`max_size` distinct chunks of N, `[C, max_size]` int32,
  -1 padded, by size then lexicographically. C = Σ_k N!/(N−k)!."""
  rows = []
  for k in range(1, max_size + 1):
    perms = np.asarray(list(itertools.permutations(range(n), k)), np.int32).reshape(-1, k)
    rows.append(np.pad(perms, ((0, 0), (0, max_size - k)), constant_values=NO_ITEM))
  out = np.concatenate(rows)
  out.setflags(write=False)
  return out


def num_ordered_combinations(n: int, max_size: int) -> int:
  return sum(math.perm(n, k) for k in range(1, max_size + 1))


@pytree.jit_static_leaves(static_argnames=("batch_size",))
def _exhaustive(scorer, costs, budget, valid, combos, used, safe, *, batch_size):
  # `used`/`safe` come precomputed from NumPy: when the caller's jit makes `combos` a
  # constant, XLA would otherwise spend seconds constant-folding them.
  cost = jnp.sum(jnp.where(used, costs[safe], 0), axis=-1)  # [C]
  ok = cost <= budget
  if valid is not None:
    ok &= jnp.all(valid[safe] | ~used, axis=-1)
  vals = lax.map(functools.partial(scorer_value, scorer), combos,
                 batch_size=min(batch_size, combos.shape[0]))
  score = jnp.where(ok, vals, -jnp.inf)
  best = jnp.argmax(score)  # ties: the first, i.e. the shortest, lexicographically smallest
  order = jnp.where(score[best] > -jnp.inf, combos[best], NO_ITEM)
  return _result(scorer, order, costs, jnp.any(ok & ~jnp.isfinite(vals)))


def exhaustive_search(scorer, costs, *, budget, max_size: int, valid=None,
                      batch_size: int = 4096) -> SearchResult:
  """CORAG Upper: the best of every ordered combination of 1…`max_size` chunks within budget.

  Scores `C = Σ_{k≤max_size} N!/(N−k)!` combinations in batches of `batch_size` (a vmapped
  scorer call each); `max_size ≤ 5`. If no chunk fits, the result is the empty combination.
  `order` has shape `[max_size]`. NaN or ±inf for a combination within the budget: as in
  `naive_rag` (eagerly a `ValueError`, else `nonfinite`).
  """
  masked = valid is not None
  costs, budget, valid, max_size = check_inputs(scorer, costs, budget, valid, max_size,
                                                depth_name="max_size")
  if max_size > MAX_EXHAUSTIVE_SIZE:
    raise ValueError(f"`max_size` must be at most {MAX_EXHAUSTIVE_SIZE} (there are "
                     f"{num_ordered_combinations(costs.shape[0], max_size):,} ordered combinations); "
                     "use `jaxsel.corag_search` for longer orders.")
  batch_size = checks.integer(batch_size, "batch_size")
  n = costs.shape[0]
  count = num_ordered_combinations(n, max_size)
  # Listing them takes a Python tuple (~64 + 8·max_size bytes) and ~4 int32/bool copies each.
  checks.fits(count * (64 + 24 * max_size), "max_size", max_size,
              what=f"the {count:,} ordered combinations of N={n} "
              "chunks it lists", fix="lower `max_size`, or use `jaxsel.corag_search`, which "
              "explores the orders without listing them")
  combos = ordered_combinations(n, max_size)
  used = combos >= 0
  res = _exhaustive(scorer, costs, budget, valid if masked else None, jnp.asarray(combos),
                    jnp.asarray(used), jnp.asarray(np.where(used, combos, 0)), batch_size=batch_size)
  return checked(res, scorer, what="exhaustive_search")

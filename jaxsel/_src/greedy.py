"""Greedy maximisation of monotone submodular objectives: dense, lazy and stochastic.

Shape legend: N candidates, K picks, M candidates re-evaluated per lazy round.

Each function handles one instance with fixed shapes (`lax` loops, masks, `-1` for an
empty slot); batch with `jax.vmap`. Ties go to the lowest index, so dense and lazy greedy
return the same picks, and greedy is a ranking: the first k-1 picks for k are the picks
for k-1 (without a budget).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import checks, native, numerics
from jaxsel._src import constraints as cons_lib
from jaxsel._src.base import NO_ITEM, KernelObjective, Objective, Selection, with_backend
from jaxsel._src.objectives.rows import GATHER_MIN_N

Array = jax.Array

METHODS = ("dense", "lazy", "stochastic")
NO_BUDGET = math.inf  # the budget of a run without costs: every candidate fits
_SLACK = 1e-5  # relative; far above float32 reordering error, far below real gaps
_WINDOW_ROUNDS = 8  # lazy rounds per top_k window
_LAZY_MIN_N = 256  # with the default block, lazy greedy on at most this many candidates takes dense steps


class _Carry(NamedTuple):
  step: Array
  done: Array
  state: object
  selected: Array  # [N] bool
  bound: Array  # [N] lazy upper bounds of the criterion
  upper: Array  # [N] upper bounds of the gains (lazy with costs; else unused, `bound`)
  spent: Array
  key: Array
  value: Array  # [] f of the picks so far
  best_bound: Array  # [] the certificate so far: the least prefix bound
  sel: Selection
  counts: Optional[Array]  # [G + 1] int32 picks per group (None without caps)


def _criterion(gains: Array, costs: Optional[Array], ratio: bool) -> Array:
  if not ratio:
    return gains
  # Cost-benefit: gain per unit cost; a free candidate with positive gain comes first.
  safe = jnp.where(costs > 0, costs, 1)
  return jnp.where(costs > 0, gains / safe, jnp.where(gains > 0, jnp.inf, 0.0))


def _batched_zero(mask: Array) -> Array:
  """An int32 zero computed from `mask` (bool, non-empty): under `vmap` it is batched, and
  sharded like the inputs, where `jnp.zeros_like` (which ignores values) never is. Loop
  state offset by it carries the batch sharding from the start, so indexing it under
  `vmap` over inputs sharded along explicit mesh axes stays unambiguous."""
  return (mask.reshape(-1)[0] & False).astype(jnp.int32)


def _knapsack(upper: Array, eligible: Array, costs: Array, budget) -> tuple[Array, Array]:
  """The best fractional knapsack of the gains `upper` `[N]` (clipped at 0) of the `eligible`
  `[N]` candidates under `budget`: by gain per unit cost (free ones first), the last item cut
  to fill the budget. Returns (its value `[]`, the critical ratio `[]`: that of the cut item,
  0 when everything fits), so the items in it are those with a positive gain and at least
  that ratio."""
  u = jnp.where(eligible, jnp.maximum(upper, 0), 0)
  ratio = _criterion(u, costs, True)
  order = jnp.argsort(-ratio, stable=True)
  c = jnp.where(eligible, costs, 0)[order]
  before = jnp.cumsum(c) - c  # cost of the better-ratio items
  room = budget - before
  frac = jnp.where(c > 0, jnp.clip(room / jnp.where(c > 0, c, 1), 0, 1), (room >= 0).astype(c.dtype))
  cut = eligible[order] & (frac < 1)
  critical = jnp.where(jnp.any(cut), ratio[order][jnp.argmax(cut)], 0)
  return jnp.sum(u[order] * frac.astype(u.dtype)), critical


def _gain_bound(upper: Array, eligible: Array, costs: Optional[Array], budget, k: int) -> Array:
  """The most any feasible set T (|T| <= k, cost(T) <= budget) can add to S, from upper bounds
  `upper` `[N]` of the gains w.r.t. S of the `eligible` `[N]` candidates: the sum of the k
  largest, and with costs the smaller of that and the best fractional knapsack (`_knapsack`).
  Both relax constraints the optimum meets (the LP with both is tighter still, and costs a
  solver), so each bounds `Σ_{j∈T} Δ(j|S)`. Shape `[]`."""
  u = jnp.where(eligible, jnp.maximum(upper, 0), 0)
  total = jnp.sum(lax.top_k(u, k)[0]) if k < u.shape[0] else jnp.sum(u)
  if costs is None:
    return total
  return jnp.minimum(total, _knapsack(upper, eligible, costs, budget)[0])


def _refresh_knapsack(obj, state, upper, fresh, eligible, costs, budget, block):
  """Lazy greedy's stale gains in the knapsack of the certificate (`_knapsack`), re-evaluated
  (`block` at a time, best ratio first) until every item it holds is `fresh` (`[N]` bool):
  a candidate the spent budget excludes is never re-evaluated by the picks, and its gain from
  an early step would loosen the bound. A few evaluations a step under a token budget (the
  knapsack holds few items). Returns (`upper` `[N]` updated, the knapsack's value `[]`)."""

  def stale_of(upper, fresh):
    sack, critical = _knapsack(upper, eligible, costs, budget)
    ratio = _criterion(jnp.maximum(upper, 0), costs, True)
    return eligible & ~fresh & (upper > 0) & (ratio >= critical), ratio, sack

  def body(c):
    upper, fresh, stale, ratio, _ = c
    vals, idx = lax.top_k(jnp.where(stale, ratio, -jnp.inf), block)
    ok = vals > -jnp.inf
    g = obj.gains(state, idx).astype(upper.dtype)
    upper = upper.at[idx].set(jnp.where(ok, g, upper[idx]))
    fresh = fresh.at[idx].set(fresh[idx] | ok)
    return (upper, fresh, *stale_of(upper, fresh))

  out = lax.while_loop(lambda c: jnp.any(c[2]), body, (upper, fresh, *stale_of(upper, fresh)))
  return out[0], out[4]


def _available(obj, selected, costs, budget, spent, cons=None, counts=None):
  avail = obj.valid & ~selected & cons_lib.open_(cons, counts)
  if costs is not None:
    avail &= costs <= budget - spent
  return avail


def _lazy_pick(obj, state, avail, bound, upper, costs, ratio, block):
  """Exact lazy step: re-evaluates the highest stale bounds, `block` per round, until no
  unevaluated candidate can beat (or tie with a lower index) the best fresh one.

  One `top_k` per window of `_WINDOW_ROUNDS` rounds sorts the stale bounds; the rounds walk
  that sorted window, so a round touches only its block (no pass over all N bounds), and
  the highest bound not yet evaluated is simply the next entry of the window. `upper` holds
  the gains as last evaluated (upper bounds of the current ones) where `ratio` makes the
  criterion differ from the gain; it comes back updated, with the mask `[N]` of the
  candidates evaluated in this step."""
  n = avail.shape[0]
  neg = jnp.asarray(-jnp.inf, bound.dtype)
  rounds = max(1, min(_WINDOW_ROUNDS, -(-n // block)))
  width = rounds * block
  take = min(width + 1, n)

  def window(c):
    bound, upper, fresh, best, best_j, best_gain, _ = c
    vals, idx = lax.top_k(jnp.where(avail & ~fresh, bound, neg), take)
    if take < width + 1:  # pad with -inf entries at out-of-range index n (scatters drop them)
      vals = jnp.concatenate([vals, jnp.full((width + 1 - take,), neg)])
      idx = jnp.concatenate([idx, jnp.full((width + 1 - take,), n, idx.dtype)])

    def walk(w):
      r, bound, upper, fresh, best, best_j, best_gain, _ = w
      pos = r * block
      cand = lax.dynamic_slice(idx, (pos,), (block,))
      ok = lax.dynamic_slice(vals, (pos,), (block,)) > neg
      g = obj.gains(state, jnp.minimum(cand, n - 1))
      crit = _criterion(g, None if costs is None else costs[jnp.minimum(cand, n - 1)], ratio)
      crit = jnp.where(ok, crit.astype(bound.dtype), neg)
      bound = bound.at[cand].set(jnp.where(ok, crit, bound[cand]), mode="drop")
      if ratio:
        upper = upper.at[cand].set(jnp.where(ok, g.astype(upper.dtype), upper[cand]), mode="drop")
      fresh = fresh.at[cand].set(fresh[cand] | ok, mode="drop")
      # The block's best (highest criterion, then lowest index) against the best so far.
      top = jnp.max(crit)
      p = jnp.argmin(jnp.where(ok & (crit == top), cand, n + 1))
      better = ok[p] & ((top > best) | ((top == best) & (cand[p] < best_j)))
      best = jnp.where(better, top, best)
      best_j = jnp.where(better, cand[p], best_j)
      best_gain = jnp.where(better, g[p], best_gain)
      # Blocks of different sizes may reduce in a different order, so a bound can sit a few
      # ulps below a fresh value: any stale bound within that slack of the winner is re-evaluated.
      nxt = vals[pos + block]
      slack = jnp.where(jnp.isfinite(best), _SLACK * jnp.abs(best), 0)
      blocked = (nxt > neg) & (nxt >= best - slack)
      return r + 1, bound, upper, fresh, best, best_j, best_gain, ~blocked

    w = lax.while_loop(lambda w: ~w[-1] & (w[0] < rounds), walk,
                       (jnp.zeros((), jnp.int32), bound, upper, fresh, best, best_j, best_gain,
                        jnp.zeros((), bool)))
    return w[1:]

  zero = _batched_zero(avail).astype(bound.dtype)  # not bound[0] * 0: bounds may be inf
  init = (bound, upper, avail & False, neg + zero, jnp.asarray(n, jnp.int32) + zero.astype(jnp.int32),
          zero, ~jnp.any(avail))
  bound, upper, fresh, best, best_j, best_gain, _ = lax.while_loop(lambda c: ~c[-1], window, init)
  return jnp.where(best_j < n, best_j, 0), best, best_gain, bound, upper, fresh


def _default_block(n: int) -> int:
  """Candidates re-evaluated per lazy round: gathered blocks (long rows) parallelise better a
  little larger (48 rows were faster than 32 at N = 6000 and 10000; measured with bench/greedy.py)."""
  return 48 if n >= GATHER_MIN_N else max(1, min(n, max(4, min(32, n // 16))))


def _pin(obj, c: _Carry, pinned, costs, budget, cons, *, k, dtype) -> _Carry:
  """The carry after the `pinned` `[P]` picks, in order (a slot of -1, one already picked,
  or one past `k` or the budget is skipped: the boundary refuses those when it can see them)."""
  n = obj.num_candidates

  def body(i, c):
    j = jnp.maximum(pinned[i], 0)
    take = (pinned[i] >= 0) & (c.step < k) & obj.valid[j] & ~c.selected[j]
    if costs is not None:
      take &= costs[j] <= budget - c.spent
    gain = obj.gains(c.state, j[None])[0].astype(dtype)
    state = jax.tree.map(lambda new, old: jnp.where(take, new, old), obj.update(c.state, j), c.state)
    value = obj.state_value(state).astype(dtype)
    spent = c.spent if costs is None else c.spent + jnp.where(take, costs[j], 0)
    s = c.sel
    pos = jnp.minimum(c.step, k - 1)
    s = s._replace(
        indices=s.indices.at[pos].set(jnp.where(take, j, s.indices[pos]).astype(jnp.int32)),
        gains=s.gains.at[pos].set(jnp.where(take, gain, s.gains[pos])),
        values=jnp.where(take & (jnp.arange(k) >= c.step), value, s.values),
        count=s.count + take.astype(jnp.int32), cost=spent)
    return c._replace(step=c.step + take.astype(jnp.int32), state=state,
                      selected=c.selected | ((jnp.arange(n) == j) & take), spent=spent, value=value,
                      sel=s, counts=cons_lib.count(cons, c.counts, j, take))

  last = jnp.max(jnp.where(pinned >= 0, jnp.arange(pinned.shape[0]) + 1, 0))  # past the last pinned
  c = lax.fori_loop(0, last, body, c)
  return c._replace(done=c.done | (c.step >= k))


def _run(obj: Objective, costs, budget, min_gain, key, *, k, method, ratio, block, sample,
         cons=None, extra=None):
  """One greedy run; with `cons` the pinned picks come first and group caps mask the
  candidates; `extra` (static) stops it after that many picks past the pinned."""
  n = obj.num_candidates
  if method in ("dense", "lazy") and isinstance(obj, KernelObjective) and cons is None:
    fused = obj.fused_greedy(costs, budget, min_gain, k=k, lazy=method == "lazy", ratio=ratio)
    if fused is not None:
      return fused
  if block is None:
    block = _default_block(n)
    if method == "lazy" and n <= _LAZY_MIN_N:
      # Lazy bookkeeping (top_k windows, rounds) costs more than it saves this small, and far
      # more under `vmap`; dense steps give the very same picks (bench/greedy.py measures the crossover).
      method = "dense"
  dtype = jax.eval_shape(lambda: obj.state_value(obj.init())).dtype
  anchor = _batched_zero(obj.valid) if n else jnp.zeros((), jnp.int32)  # offsets all loop state
  state0 = jax.tree.map(lambda x: x + anchor.astype(x.dtype), obj.init())
  budget = jnp.asarray(budget, jnp.float32)  # inf without costs (`_greedy` decides)
  zero = anchor.astype(jnp.float32)
  bound0 = jnp.full((n,), jnp.inf, dtype) + anchor.astype(dtype)
  upper0 = bound0
  if method == "lazy" and n:
    upper0 = obj.gains(state0).astype(dtype)
    bound0 = _criterion(upper0, costs, ratio).astype(dtype)
  value0 = obj.state_value(state0).astype(dtype)
  # The certificate: OPT <= f(S) + the most a feasible set can add to S (`_gain_bound`), for
  # every prefix S whose gains (or upper bounds of them: the stale bounds of lazy greedy) a
  # step has; the least over the prefixes. Stochastic greedy has a sample's gains only: none.
  best0 = value0 if k == 0 or n == 0 else jnp.full((), jnp.inf, dtype) + anchor.astype(dtype)
  if method == "stochastic":
    best0 = jnp.full((), jnp.nan, dtype) + anchor.astype(dtype)
  sel0 = Selection(
      indices=jnp.full((k,), NO_ITEM, jnp.int32) + anchor,
      gains=jnp.zeros((k,), dtype) + anchor.astype(dtype),
      values=jnp.zeros((k,), dtype) + anchor.astype(dtype),
      count=anchor,
      cost=zero,
      bound=best0,
      certified=jnp.zeros((), dtype) + anchor.astype(dtype))
  carry = _Carry(anchor, jnp.asarray(k == 0 or n == 0) | (anchor != 0), state0,
                 jnp.zeros((n,), bool) | (anchor != 0), bound0, upper0, zero,
                 jax.random.key(0) if key is None else key, value0, best0, sel0,
                 cons_lib.counts0(cons, anchor))
  room = budget  # what the picks past the pinned may spend (the certificate's knapsack)
  if cons is not None and cons.pinned is not None and k and n:
    carry = _pin(obj, carry, cons.pinned, costs, budget, cons, k=k, dtype=dtype)
    if method == "lazy":
      upper0 = obj.gains(carry.state).astype(dtype)
      carry = carry._replace(upper=upper0, bound=_criterion(upper0, costs, ratio).astype(dtype))
    if method != "stochastic":  # the pinned fill k: the optimum holds them and nothing else
      best = jnp.where(carry.step >= k, carry.value, carry.best_bound)
      carry = carry._replace(best_bound=best, sel=carry.sel._replace(bound=best))
    room = budget - carry.spent
  step0 = carry.step  # the first step past the pinned
  last = k if extra is None else jnp.minimum(k, step0 + extra)
  # May be in S* \ S: the caps are not applied here (see `greedy`'s docstring).
  eligible0 = obj.valid if costs is None else obj.valid & (costs <= room)

  def body(c: _Carry) -> _Carry:
    avail = _available(obj, c.selected, costs, budget, c.spent, cons, c.counts)
    bound, upper, key, best_bound = c.bound, c.upper, c.key, c.best_bound
    if method == "dense":
      g = obj.gains(c.state)
      crit = jnp.where(avail, _criterion(g, costs, ratio), -jnp.inf)
      j = numerics.first_argmax(crit)
      best, gain = crit[j], g[j]
      upper = g.astype(dtype)  # every gain, fresh
    elif method == "lazy":
      j, best, gain, bound, upper, fresh = _lazy_pick(obj, c.state, avail, c.bound, c.upper,
                                                      costs, ratio, block)
      upper = upper if ratio else bound
    else:  # stochastic greedy: the best of a random sample of the available candidates
      key, sub = jax.random.split(c.key)
      u = jnp.where(avail, jax.random.uniform(sub, (n,)), 2.0)
      _, idx = lax.top_k(-u, sample)
      ok = avail[idx]
      g = obj.gains(c.state, idx)
      crit = jnp.where(ok, _criterion(g, None if costs is None else costs[idx], ratio), -jnp.inf)
      m = jnp.argmax(crit)
      j, best, gain = idx[m], crit[m], g[m]
    if method != "stochastic":
      eligible = eligible0 & ~c.selected
      adds = _gain_bound(upper, eligible, None, None, k)
      if costs is not None:
        if method == "lazy":  # at step 0 every gain is fresh (`upper0`)
          upper, sack = _refresh_knapsack(obj, c.state, upper, fresh | (c.step == step0), eligible,
                                          costs, room, block)
          adds = _gain_bound(upper, eligible, None, None, k)
        else:
          sack, _ = _knapsack(upper, eligible, costs, room)
        adds = jnp.minimum(adds, sack)
      best_bound = jnp.minimum(best_bound, c.value + adds.astype(dtype))
    stop = best == -jnp.inf
    if min_gain is not None:
      stop |= gain < min_gain
    take = ~stop
    state = jax.tree.map(lambda new, old: jnp.where(take, new, old), obj.update(c.state, j), c.state)
    value = obj.state_value(state)
    spent = c.spent if costs is None else c.spent + jnp.where(take, costs[j], 0)
    s = c.sel
    s = Selection(
        indices=s.indices.at[c.step].set(jnp.where(take, j, NO_ITEM).astype(jnp.int32)),
        gains=s.gains.at[c.step].set(jnp.where(take, gain, 0).astype(dtype)),
        values=jnp.where(jnp.arange(k) >= c.step, value, s.values).astype(dtype),
        count=s.count + take.astype(jnp.int32),
        cost=spent,
        bound=best_bound,
        certified=s.certified)
    return _Carry(c.step + 1, stop | (c.step + 1 >= last), state,
                  c.selected.at[j].set(c.selected[j] | take), bound, upper, spent, key,
                  value.astype(dtype), best_bound, s, cons_lib.count(cons, c.counts, j, take))

  if k == 0 or n == 0:  # nothing to pick: empty arrays, count 0
    return sel0
  out = lax.while_loop(lambda c: ~c.done, body, carry)
  return out.sel


def _best_single(obj, costs, budget, *, k):
  """The best feasible single candidate, as a Selection."""
  g = obj.gains(obj.init())
  avail = obj.valid & (costs <= budget)
  crit = jnp.where(avail, g, -jnp.inf)
  j = jnp.argmax(crit)
  ok = crit[j] > -jnp.inf
  dtype = g.dtype
  first = jnp.arange(k) == 0  # a select, not a scatter: keeps the batch sharding under vmap
  return Selection(
      indices=jnp.where(first, jnp.where(ok, j, NO_ITEM), NO_ITEM).astype(jnp.int32),
      gains=jnp.where(first, jnp.where(ok, g[j], 0), 0).astype(dtype),
      values=jnp.full((k,), jnp.where(ok, g[j], 0), dtype),
      count=ok.astype(jnp.int32),
      cost=jnp.where(ok, costs[j], 0).astype(jnp.float32),
      bound=jnp.full((), jnp.inf, dtype),  # no gains past the first step: no certificate
      certified=jnp.zeros((), dtype))


def _final_value(s: Selection) -> Array:
  return jnp.where(s.count > 0, s.values[-1], -jnp.inf)


def _better(a: Selection, b: Selection) -> Selection:
  """`a` if its final value is at least `b`'s, else `b` (leafwise select); the bound is the
  lesser of the two, both runs solving the same problem."""
  take_a = _final_value(a) >= _final_value(b)
  best = jax.tree.map(lambda x, y: jnp.where(take_a, x, y), a, b)
  return best._replace(bound=jnp.minimum(a.bound, b.bound))


def _certify(s: Selection) -> Selection:
  """`bound` no lower than f(S) (float rounding could put a tight one a few ulps below: the
  exact bound is at least OPT >= f(S)) and `certified = f(S) / bound`."""
  value = s.values[-1] if s.values.shape[-1] else jnp.zeros((), s.bound.dtype)
  bound = jnp.maximum(s.bound, value.astype(s.bound.dtype))  # NaN (no bound) stays NaN
  ratio = jnp.where(bound > 0, value / jnp.where(bound > 0, bound, 1), 1)
  return s._replace(bound=bound, certified=jnp.where(jnp.isnan(bound), jnp.nan, ratio).astype(bound.dtype))


@functools.partial(jax.jit, static_argnames=("k", "method", "block", "sample", "use_key"))
def _greedy(obj, costs, budget, min_gain, key, cons, *, k, method, block, sample, use_key):
  key = key if use_key else None
  if costs is None or k == 0 or obj.num_candidates == 0:
    return _certify(_run(obj, None, NO_BUDGET, min_gain, key, k=k, method=method, ratio=False,
                         block=block, sample=sample, cons=cons))
  # Budgeted: cost-benefit greedy, plain-gain greedy and the best single item; the best of
  # the three keeps the (1 - 1/e)/2 guarantee of Khuller, Moss & Naor (1999) / Leskovec
  # et al. (2007), where cost-benefit alone can be arbitrarily bad.
  ka, kb = (None, None) if key is None else tuple(jax.random.split(key))
  run = functools.partial(_run, obj, costs, budget, min_gain, k=k, block=block, sample=sample,
                          cons=cons)
  cb = run(ka, method=method, ratio=True)
  uc = run(kb, method=method, ratio=False)
  best = _better(cb, uc)
  if cons is None:
    single = _best_single(obj, costs, budget, k=k)
    if min_gain is not None:  # a single item below the threshold is no pick at all
      single = single._replace(count=jnp.where(single.gains[0] >= min_gain, single.count, 0))
  else:  # the pinned, then the best feasible single addition
    single = run(None, method="dense", ratio=False, extra=1)
  return _certify(_better(best, single))


def greedy(objective: Objective, *, k: int, costs=None, budget=None, min_gain=None,
           method: str = "lazy", key=None, epsilon: float = 0.1, block: Optional[int] = None,
           backend: Optional[str] = None, pinned=None, groups=None, max_per_group=None) -> Selection:
  """Greedy maximisation of `objective` with up to `k` picks.

  Args:
    objective: a jaxsel objective (one instance; `jax.vmap` this function for a batch).
    k: maximum number of picks (static). `k = 0` returns empty arrays; `N = 0` needs `k = 0`.
    costs: `[N]` non-negative cost of each candidate (e.g. tokens); needs `budget`.
    budget: total cost allowed. The picks never exceed it: the result is the best of
      cost-benefit greedy, plain-gain greedy and the best single feasible candidate.
    min_gain: stop once the marginal gain of the next pick falls below this (saturation);
      `Selection.count` says how many were taken.
    method: ``"lazy"`` (default; exact, same picks as ``"dense"``, re-evaluating only blocks
      of candidates whose stale upper bound could still win), ``"dense"`` (all gains every
      step) or ``"stochastic"`` (Mirzasoleiman et al. 2015: the best of a random sample of
      `ceil(N/k · log(1/epsilon))` candidates per step; `(1 - 1/e - epsilon)` in expectation).
    key: PRNG key, required for ``"stochastic"``.
    epsilon: stochastic greedy's accuracy parameter, in (0, 1).
    block: candidates re-evaluated per lazy round (static; default `clip(N // 16, 4, 32)`,
      at most N, and 48 from 5000 candidates on, where rows are gathered into blocks). With
      the default, ``"lazy"`` on at most 256 candidates takes dense steps (the same picks;
      below that size, and above all under `vmap`, the lazy bookkeeping costs more than the
      gain evaluations it saves); pass `block` to force lazy rounds. The native CPU kernel
      likewise takes dense steps on a batch of small problems built inside `jit` (item-major
      input) while `k <= 16` and `N·k <= 2048`: same picks, dense greedy's certificate.
    backend: ``"auto"``, ``"native"`` or ``"xla"`` (static): where gains and fused greedy
      runs are computed; None keeps the objective's own (its constructor's `backend`).
      Both give the same picks.
    pinned: int `[P]` candidates picked first, in that order, `-1` padded (may differ per
      instance under `vmap`). They count against `k`, the budget and their group's cap;
      `min_gain` does not stop them. Refused before compiling when concrete: an index out of
      [-1, N), a repeat, an invalid candidate, more than `k`, costing more than the budget, or
      more than a group's cap. Under `jit` / `vmap` such values are not seen: a pinned
      candidate that no longer fits `k` or the budget is skipped.
    groups: int `[N]` group id of each candidate (-1: in no group); with `max_per_group`.
    max_per_group: the most picks per group: a scalar (every group; ids in [0, N)) or `[G]`
      (ids in [0, G)). With `groups`, the picks form a partition matroid and the knapsack.
      With any constraint the native fused greedy run is skipped (it knows none): the XLA
      loop runs, with gains still from the native kernels where the objective has them. The
      budgeted best of three respects them all: cost-benefit and plain greedy run under the
      constraints, and the single is the pinned plus the best feasible single addition.

  Returns:
    `Selection` with `indices` `[k]`, `gains` `[k]`, `values` `[k]`, `count`, `cost`, and a
    certificate: `bound`, an upper bound on the optimum over all sets within `k` and the
    budget, and `certified = f(picks) / bound` (the picks reach at least that share of the
    optimum). It is the online bound of Leskovec et al. (2007): for any set S, submodularity
    gives `OPT <= f(S) + Σ_{j∈S*} Δ(j|S)`, and the sum is at most the `k` largest gains w.r.t.
    S (and, with costs, at most the best fractional knapsack of the gains under the budget;
    the smaller of the two counts); it is taken at every prefix of the run whose gains greedy
    computed and the least kept. Lazy greedy uses its stale gains, upper bounds of the
    current ones, so its bound is valid and may be looser than dense greedy's; stochastic
    greedy sees a sample's gains only and returns NaN for both. No pass over the data is
    added: the bound comes from the gains each step computes anyway.

    Under constraints the bound is over the sets that hold the pinned and meet `k`, the budget
    and the caps. It stays valid: any such T and any prefix S holding the pinned have
    `f(T) <= f(S) + Σ_{j∈T\\S} Δ(j|S)`, where T \\ S holds at most k candidates of cost at
    most `budget - cost(pinned)`, so the top-k / knapsack of the gains over the candidates not
    in S bounds it (the knapsack under the budget left after the pinned). The caps are
    relaxed, not used: a group that S has filled may still hold picks of T (T need not share
    S's picks in it), so masking it out of the bound would be wrong; the bound is the
    unconstrained one's, only ever looser than the caps' optimum needs.
  """
  if not isinstance(objective, Objective):
    raise TypeError(
        f"`objective` must be a jaxsel objective (e.g. `jaxsel.facility_location(...)`), "
        f"got {type(objective).__name__}.")
  n = objective.num_candidates
  if jnp.ndim(objective.valid) != 1:
    raise ValueError(
        f"`objective` is a batch (`valid` has shape {jnp.shape(objective.valid)}); greedy takes one "
        "instance: `jax.vmap(lambda o: jaxsel.greedy(o, k=...))(objectives)`.")
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
    raise TypeError(f"`k` must be a Python int (it fixes output shapes), got {type(k).__name__}.")
  k = int(k)
  if k < 0 or k > n:
    raise ValueError(f"`k` must be between 0 and the number of candidates N={n}, got {k}.")
  checks.choice(method, "method", METHODS)
  if (costs is None) != (budget is None):
    raise ValueError("`costs` and `budget` go together: pass both (a knapsack budget) or neither.")
  if costs is not None:
    costs, budget = checks.costs_and_budget(costs, budget, n,
                                            batch="one instance; `jax.vmap` for a batch")
  if min_gain is not None:
    min_gain = checks.as_float_array(min_gain, "min_gain").astype(jnp.float32)
    if min_gain.ndim != 0:
      raise ValueError(f"`min_gain` must be a scalar, got shape {min_gain.shape}.")
    if checks.is_concrete(min_gain) and not np.isfinite(np.asarray(min_gain)).all():
      raise ValueError("`min_gain` must be finite.")
  if method == "stochastic":
    if key is None:
      raise ValueError("`method='stochastic'` needs a PRNG `key` (e.g. `jax.random.key(0)`).")
    if not 0 < epsilon < 1:
      raise ValueError(f"`epsilon` must lie in (0, 1), got {epsilon}.")
  if block is not None and (not isinstance(block, int) or not 1 <= block <= max(n, 1)):
    raise ValueError(f"`block` must be an int in [1, N={n}], got {block!r}.")
  cons = cons_lib.check(pinned, groups, max_per_group, n=n, k=k, costs=costs, budget=budget,
                        valid=objective.valid)
  if backend is not None:
    objective = with_backend(objective, native.check_backend(backend))
  sample = max(1, min(n, math.ceil(n / max(k, 1) * math.log(1 / epsilon))))
  return _greedy(objective, costs, budget, min_gain, key, cons, k=k, method=method,
                 block=block, sample=sample, use_key=key is not None)


def saturation_point(selection: Selection, *, rel_gain: float = 0.05) -> Array:
  """Number of picks before the curve saturates: the first pick whose marginal gain is
  below `rel_gain` times the first pick's gain is not counted. Shape `[]` (or `[B]`).
  A selection of NumPy arrays is answered in NumPy (a result's table runs no JAX program)."""
  g = selection.gains
  xp = np if isinstance(g, np.ndarray) else jnp
  k = g.shape[-1]
  if k == 0:  # no room for a pick: nothing before saturation
    return xp.zeros(g.shape[:-1], xp.int32)
  first = g[..., :1]
  taken = xp.arange(k) < xp.asarray(selection.count)[..., None]
  low = (g < rel_gain * first) | ~taken
  return xp.where(xp.any(low, axis=-1), xp.argmax(low, axis=-1), k).astype(xp.int32)

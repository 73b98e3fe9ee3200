"""The compiled part of a Pipeline request: from embeddings to picks, in one jitted function.

Shape legend: Q queries, N candidates, D embedding dimension, K picks (or positions T).

Scores, the objective or scorer, the greedy run / search / baseline and the curve of values
after each pick are one program per method and shape. Shapes are bucketed (`bucket`): a
request's candidates are padded to the next of a few sizes (four per octave) with a `valid`
mask, and its queries to a power of two, so a stream of requests of varying sizes compiles a
handful of programs and a request of a seen shape compiles nothing. Padded candidates are
never picked and never counted, so the picks are those of the unpadded request.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import constraints as cons_lib
from jaxsel._src import methods
from jaxsel._src import tree as tree_lib
from jaxsel._src.base import NO_ITEM
from jaxsel._src.baselines import mmr, naive_rag
from jaxsel._src.greedy import greedy
from jaxsel._src.search import corag_search

Array = jax.Array

MIN_BUCKET = 8
# What the baselines score their curve with (CORAG: the request's scorer).
BASELINE_SCORERS = {"naive": "relevance", "mmr": "facility_location"}


def bucket(n: int, *, per_octave: int = 4, minimum: int = MIN_BUCKET) -> int:
  """The padded size of `n`: `minimum`, then `per_octave` steps per doubling (8, 10, 12, 14,
  16, 20, 24, 28, 32, 40, ...), so padding adds at most a quarter."""
  size = minimum
  while size < n:
    step = max(1, (1 << (size.bit_length() - 1)) // per_octave)
    size += step
  return size


def query_bucket(q: int) -> int:
  """Queries are few: the next power of two."""
  return 1 << max(0, (max(q, 1) - 1).bit_length())


class Inputs(NamedTuple):
  """One request, padded (`[B]` leading axis for `select_many`)."""
  query: Array  # [Q, D] query embeddings (zero rows on padding)
  query_valid: Array  # [Q] bool
  passages: Array  # [N, D] passage embeddings (asymmetric prompt)
  symmetric: Array  # [N, D] symmetric embeddings (similarity)
  costs: Array  # [N] float32 tokens
  valid: Array  # [N] bool
  # The text signals (`methods.TextSignals`: links, mentions, shared phrases, groups, lexical
  # overlaps), only for requests whose scorer reads them (`methods.USES_TEXT_SIGNALS`).
  signals: Optional[methods.TextSignals] = None
  # Constraints (read when `SolveConfig.constrained`; padded candidates: no group, uncapped).
  pinned: Optional[Array] = None  # [N] int32 candidates picked first, in order; -1 after
  cap_groups: Optional[Array] = None  # [N] int32 group id of each candidate in [0, N); -1: none
  caps: Optional[Array] = None  # [N] int32 most picks per group id
  # [N] bool: a candidate whose text an earlier or pinned one has (`candidates.repeats`); CORAG
  # searches and tops up without them. None: no request of the batch has one.
  repeats: Optional[Array] = None
  # [W] int32 the candidates the CORAG search runs over (`SolveConfig.width`; -1 padded): the
  # pinned, then the best by `first_pass`; the text signals are theirs (`[W, W]`). None: all.
  searched: Optional[Array] = None


class Settings(NamedTuple):
  """Numbers that may change per request without recompiling (`[B]` for `select_many`)."""
  budget: Array  # [] tokens; inf: no budget
  min_gain: Array  # [] (ignored unless `SolveConfig.use_min_gain`)
  discount: Array  # []
  exploration: Array  # []
  cost_penalty: Array  # []
  diversity: Array  # []
  widening: Array  # [] CORAG's progressive widening (read when `SolveConfig.widen`; 0: none)
  # [] int32 most picks of CORAG, NaiveRAG and MMR (the request's `k`): a runtime value under
  # the static `SolveConfig.depth`, so a new `k` compiles nothing.
  limit: Array = np.int32(2**30)

  @classmethod
  def of(cls, *, budget: float, min_gain: Optional[float], discount: float, exploration: float,
         cost_penalty: float, diversity: float, widening: float = 0.0,
         limit: Optional[int] = None) -> "Settings":
    """Host scalars (float32, `limit` int32); `min_gain` None is 0 (then `use_min_gain` is
    off); `limit` None: no limit but the static depth."""
    floats = (np.float32(x) for x in (budget, 0.0 if min_gain is None else min_gain, discount,
                                      exploration, cost_penalty, diversity, widening))
    return cls(*floats, np.int32(2**30 if limit is None else limit))


@dataclasses.dataclass(frozen=True)
class SolveConfig:
  """What fixes a compiled solve: hashable, the one static argument of `solve`.

  Attributes:
    method: the Pipeline's method (`methods.METHODS`).
    k: picks (positions of the output arrays); depth: most picks of mmr/naive/CORAG.
    greedy_method, nonneg, backend: as in `PipelineConfig`.
    scorer, iterations: the CORAG scorer (a registry name or a builder) and search length.
    dense: build the `[N, N]` similarity (else the matrix-free objectives).
    knapsack: greedy under the budget (a finite `Settings.budget`), or plain greedy.
    use_min_gain: greedy stops below `Settings.min_gain`.
    top_up: fill the budget the CORAG search leaves with the most relevant candidates.
    constrained: honour `Inputs.pinned`, `cap_groups` and `caps` (else they are not read, and
      greedy keeps its native fused run).
    widen: CORAG searches with `Settings.widening` (else without widening, and it is not read).
    width: CORAG searches over the `width` candidates of `Inputs.searched` (its scorer, text
      signals and tree are theirs; the top-up sees all), else over all of them.
  """
  method: str
  k: int
  depth: int
  greedy_method: str = "lazy"
  scorer: Any = "learned_hops"
  iterations: int = 15
  nonneg: str = "clip"
  dense: bool = True
  backend: str = "auto"
  knapsack: bool = True
  use_min_gain: bool = False
  top_up: bool = False
  constrained: bool = False
  widen: bool = False
  width: Optional[int] = None


class Output(NamedTuple):
  order: Array  # [K] int32 picks in order, NO_ITEM after the last
  gains: Array  # [K] marginal gain (or scorer increment) of each pick
  curve: Array  # [K] objective (or scorer) value after each pick
  count: Array  # [] int32 picks
  relevance: Array  # [Q, N] r_qj
  nonfinite: Array  # [] bool: the search's or baseline's scorer gave NaN or ±inf (`SearchResult`)
  bound: Array  # [] greedy's certificate: no selection within the budget and k beats it (NaN: none)
  certified: Array  # [] f(picks) / bound (NaN: none)
  exhausted: Array  # [] bool: the CORAG tree holds every order within budget and depth
  searched: Array  # [] the value of the CORAG search's answer, before any top-up (NaN: not CORAG)
  estimate: Array  # [] the CORAG search's highest optimistic value estimate (NaN: not CORAG)


def _prefix_values(scorer, order: Array):
  """Scorer values after each prefix of `order` `[T]` (the curve) and their increments: one
  pass for a scorer with `prefix_values` (an objective's: O(T·N)), else every prefix scored."""
  if hasattr(scorer, "prefix_values"):
    values = scorer.prefix_values(order).astype(jnp.float32)
    empty = scorer(jnp.full(order.shape, NO_ITEM, jnp.int32)).astype(jnp.float32)
    return values, jnp.diff(jnp.concatenate([empty[None], values]))
  t = order.shape[0]
  prefixes = jnp.where(jnp.arange(t)[None, :] < jnp.arange(1, t + 1)[:, None], order[None, :], NO_ITEM)
  values = jax.vmap(scorer)(jnp.concatenate([jnp.full((1, t), NO_ITEM, jnp.int32), prefixes]))
  values = values.astype(jnp.float32)
  return values[1:], jnp.diff(values)


def request(inputs: Inputs, *, nonneg: str = "clip", dense: bool = True) -> methods.Request:
  """The registry's `Request` of one padded request: what every method and scorer of the
  Pipeline is built from. Research code that scores requests itself (label sweeps, training)
  builds them here too (`jaxsel.contrib.registry.pipeline_request`), so what it scores is what the
  search sees, text signals included. Works under `jit` and `vmap`."""
  return methods.request(inputs.query, inputs.passages, inputs.symmetric, costs=inputs.costs,
                         signals=inputs.signals, valid=inputs.valid,
                         query_valid=inputs.query_valid, nonneg=nonneg, dense=dense)


@functools.partial(jax.jit, static_argnames=("config",))
def solve(inputs: Inputs, settings: Settings, config: SolveConfig) -> Output:
  """Picks for one padded request (see the module docstring); `jax.vmap` it for a batch."""
  c = config
  # A search of width W builds its own `[W, W]` similarity; the request's `[N, N]` is not read.
  req = request(inputs, nonneg=c.nonneg, dense=c.dense and c.width is None)
  cons = {}
  if c.constrained:
    cons = {"pinned": inputs.pinned, "groups": inputs.cap_groups, "max_per_group": inputs.caps}
  no = jnp.zeros((), bool)
  nan = jnp.full((), jnp.nan, jnp.float32)
  if c.method in methods.SUBMODULAR:
    obj = methods.objective(c.method, req, nonneg=c.nonneg, backend=c.backend)
    knapsack = {"costs": req.costs, "budget": settings.budget} if c.knapsack else {}
    sel = greedy(obj, k=c.k, min_gain=settings.min_gain if c.use_min_gain else None,
                 method=c.greedy_method, **knapsack, **cons,
                 key=jax.random.key(0) if c.greedy_method == "stochastic" else None)
    return Output(sel.indices, sel.gains.astype(jnp.float32), sel.values.astype(jnp.float32),
                  sel.count, req.relevance, no,
                  sel.bound.astype(jnp.float32), sel.certified.astype(jnp.float32), no, nan, nan)
  # No budget (inf): every candidate fits, and CORAG's cost penalty is relative to them all.
  total = jnp.where(jnp.isfinite(settings.budget), settings.budget, jnp.sum(req.costs))
  shown = req.relevance  # what the result reports: every candidate's relevance
  if c.method == "corag":  # each text searched once
    req = _without(req, inputs.repeats)
  rel = methods.best_relevance(req)
  if c.method == "naive":
    sc = methods.scorer(BASELINE_SCORERS["naive"], req, discount=1.0)  # curve: total relevance
    res = naive_rag(sc, req.costs, budget=total, max_depth=c.depth, relevance=rel, valid=req.valid,
                    **cons)
  elif c.method == "mmr":
    sc = methods.scorer(BASELINE_SCORERS["mmr"], req, discount=1.0)  # curve: f(S)
    res = mmr(sc, req.costs, budget=total, similarity=req.similarity, diversity=settings.diversity,
              max_depth=c.depth, relevance=rel, valid=req.valid, **cons)
  else:
    return _corag(inputs, settings, c, req, rel, total, cons, shown)
  curve, gains = _prefix_values(sc, res.order)
  return Output(res.order, gains, curve, res.length, shown, res.nonfinite, nan, nan, no, nan, nan)


def _corag(inputs: Inputs, settings: Settings, c: SolveConfig, req: methods.Request, rel: Array,
           total: Array, cons: dict, shown: Array) -> Output:
  """The CORAG branch of `solve`: the search over all candidates, or over the `c.width` of
  `inputs.searched` (`_searched`) with its order mapped back; then the top-up over all."""
  sreq, scons, inverse = req, cons, None
  if c.width is not None:
    sub, inverse = _searched(inputs)
    sreq = _without(request(sub, nonneg=c.nonneg, dense=c.dense), sub.repeats)
    if c.constrained:
      scons = {"pinned": sub.pinned, "groups": sub.cap_groups, "max_per_group": sub.caps}
  sc = methods.scorer(c.scorer, sreq, discount=settings.discount)
  depth = min(c.depth, sreq.costs.shape[0])
  res = corag_search(sc, sreq.costs, budget=total, iterations=c.iterations,
                     exploration=settings.exploration, cost_penalty=settings.cost_penalty,
                     max_depth=depth, valid=sreq.valid, limit=settings.limit,
                     widening=settings.widening if c.widen else None, **scons)
  if inverse is not None:  # subset indices -> the request's, padded to the full depth
    idx = jnp.maximum(inputs.searched, 0)
    order = jnp.where(res.order >= 0, idx[jnp.maximum(res.order, 0)], NO_ITEM)
    res = res._replace(order=jnp.concatenate(
        [order, jnp.full((c.depth - depth,), NO_ITEM, jnp.int32)]))
  if c.top_up:
    res = res._replace(**_top_up(res.order, req.costs, rel, total, req.valid,
                                 cons_lib.check(None, cons.get("groups"), cons.get("max_per_group"),
                                                n=req.costs.shape[0]), limit=settings.limit))
  if inverse is None:
    curve, gains = _prefix_values(sc, res.order)
  else:
    curve, gains = _subset_prefix_values(sc, res.order, inverse, depth)
  nan = jnp.full((), jnp.nan, jnp.float32)
  exhausted, searched, estimate = tree_lib.search_estimate(res.tree, settings.exploration)
  return Output(res.order, gains, curve, res.length, shown, res.nonfinite, nan, nan,
                exhausted, searched, estimate)


def _without(req: methods.Request, repeats: Optional[Array]) -> methods.Request:
  """`req` with the `repeats` `[N]` (`Inputs.repeats`; None: none) invalid, costing 0."""
  if repeats is None:
    return req
  keep = req.valid & ~repeats
  return req._replace(relevance=jnp.where(keep[None, :], req.relevance, 0),
                      costs=jnp.where(keep, req.costs, 0), valid=keep)


def _searched(inputs: Inputs) -> tuple:
  """(the request restricted to `inputs.searched` `[W]`: its candidates, constraints mapped to
  their places in it (the pinned lead it, `pad_batch`), the text signals already theirs;
  `inverse` `[N]` int32: each candidate's place in it, -1 outside)."""
  idx, n = inputs.searched, inputs.costs.shape[0]
  w = idx.shape[0]
  ok = idx >= 0
  safe = jnp.where(ok, idx, 0)
  inverse = jnp.full((n,), NO_ITEM, jnp.int32).at[jnp.where(ok, idx, n)].set(
      jnp.arange(w, dtype=jnp.int32), mode="drop")
  take = lambda x: None if x is None else x[safe]  # noqa: E731
  pinned = None
  if inputs.pinned is not None:
    p = inputs.pinned[:w]
    pinned = jnp.where(p >= 0, inverse[jnp.maximum(p, 0)], NO_ITEM)
  sub = inputs._replace(passages=take(inputs.passages), symmetric=take(inputs.symmetric),
                        costs=jnp.where(ok, inputs.costs[safe], 0), valid=inputs.valid[safe] & ok,
                        pinned=pinned, cap_groups=take(inputs.cap_groups),
                        repeats=take(inputs.repeats), searched=None)
  return sub, inverse


def _subset_prefix_values(scorer, order: Array, inverse: Array, w: int):
  """`_prefix_values` of an `order` `[T]` of the request's candidates, scored by a `scorer` of
  the searched subset (`inverse` `[N]`: each candidate's place in it, -1 outside): a pick
  outside the subset adds 0 (the scorer does not know it). At most `w` picks lie inside."""
  sub = jnp.where(order >= 0, inverse[jnp.maximum(order, 0)], NO_ITEM)
  inside = sub >= 0
  pos = jnp.cumsum(inside.astype(jnp.int32)) - 1  # subset picks so far, less one
  compact = jnp.full((w,), NO_ITEM, jnp.int32).at[jnp.where(inside, pos, w)].set(sub, mode="drop")
  values, _ = _prefix_values(scorer, compact)
  empty = jax.vmap(scorer)(jnp.full((1, w), NO_ITEM, jnp.int32))[0].astype(jnp.float32)
  curve = jnp.where(pos >= 0, values[jnp.clip(pos, 0, w - 1)], empty)
  return curve, jnp.diff(jnp.concatenate([empty[None], curve]))


def _top_up(order: Array, costs: Array, relevance: Array, budget: Array, valid: Array,
            cons=None, limit=None) -> dict:
  """The searched `order` `[T]` followed by the unused valid candidates in decreasing relevance
  (ties to the lower index) that still fit the budget (and their group's cap, `cons`), while
  positions are left (at most `limit` picks in all): NaiveRAG on what the search left over.
  -> `{"order", "length", "cost"}`."""
  t, n = order.shape[0], costs.shape[0]
  length = jnp.sum(order >= 0).astype(jnp.int32)
  used = jnp.zeros((n,), bool).at[jnp.where(order >= 0, order, n)].set(True, mode="drop")
  spent = jnp.sum(jnp.where(used, costs, 0))
  ranked = jnp.argsort(jnp.where(valid, -relevance, jnp.inf), stable=True)

  def step(i, c):
    order, length, spent = c
    j = ranked[i]
    take = valid[j] & ~used[j] & (spent + costs[j] <= budget) & (length < t)
    if limit is not None:
      take &= length < limit
    take &= cons_lib.room(cons, cons_lib.used(order, n))[j]
    order = jnp.where(take, order.at[jnp.minimum(length, t - 1)].set(j), order)
    return order, length + take.astype(jnp.int32), spent + jnp.where(take, costs[j], 0)

  order, length, spent = lax.fori_loop(0, n, step, (order, length, spent))
  return {"order": order, "length": length, "cost": spent}


def row(tree: NamedTuple, i: int):
  """Request `i` of a `[B]` batch (`pad_batch`'s `Inputs`, an `Output`): host arrays, no copy.
  A NamedTuple of arrays (None, or a NamedTuple of them, in optional fields), so its fields are
  indexed directly (`jax.tree.map` costs 3x more, and `select_many` calls this once per
  request)."""
  return type(tree)(*(None if x is None else row(x, i) if isinstance(x, tuple) else x[i]
                      for x in tree))


def _signals(b: int, n: int, lexical: bool) -> methods.TextSignals:
  """Zero text signals of a `[B]` batch of `n` candidates: each candidate its own group."""
  square = (lambda: np.zeros((b, n, n), np.float32)) if lexical else (lambda: None)
  return methods.TextSignals(
      links=np.zeros((b, n, n), np.float32), mentioned=np.zeros((b, n), np.float32),
      entities=np.zeros((b, n, n), np.float32),
      groups=np.broadcast_to(np.arange(n, dtype=np.int32), (b, n)).copy(),
      overlap=np.zeros((b, n), np.float32) if lexical else None, covered=square(), shared=square())


def pad_batch(requests: Sequence[tuple], *, n: int, q: int, w: Optional[int] = None) -> Inputs:
  """`[B]` requests padded to `n` candidates and `q` queries, host side, written straight into
  the `[B, ...]` arrays. Each request is `(q_emb [Q, D] or None, p_emb [M, D], s_emb [M, D],
  costs [M], signals[, constraints[, repeats[, searched]]])`, `signals` a `methods.TextSignals`
  or None, `constraints` None or `(pinned [P], cap_groups [M] ids in [0, M) or -1, cap int)`,
  `repeats` None or `[M]` bool (`candidates.repeats`), `searched` None or `[W']` int32 (the
  candidates a CORAG search of width `w` runs over; its `signals` are theirs, `[W', W']`);
  padded candidates are invalid and each its own group (and in no capped group). The batch
  carries text signals only when one of its requests has them (zeros for the others), and the
  lexical ones only when one has those."""
  b, d = len(requests), requests[0][1].shape[1]
  given = [r[4] for r in requests if r[4] is not None]
  repeated = any(len(r) > 6 and r[6] is not None for r in requests)
  ns = n if w is None else w  # the text signals' size: all candidates, or the searched
  sig = _signals(b, ns, any(g.overlap is not None for g in given)) if given else None
  out = Inputs(query=np.zeros((b, q, d), np.float32), query_valid=np.zeros((b, q), bool),
               passages=np.zeros((b, n, d), np.float32), symmetric=np.zeros((b, n, d), np.float32),
               costs=np.zeros((b, n), np.float32), valid=np.zeros((b, n), bool), signals=sig,
               pinned=np.full((b, n), NO_ITEM, np.int32),
               cap_groups=np.full((b, n), NO_ITEM, np.int32),
               caps=np.full((b, n), cons_lib.UNCAPPED, np.int32),
               repeats=np.zeros((b, n), bool) if repeated else None,
               searched=None if w is None else np.full((b, w), NO_ITEM, np.int32))
  for i, (q_emb, p_emb, s_emb, costs, signals, *rest) in enumerate(requests):
    m = p_emb.shape[0]
    if len(rest) > 1 and rest[1] is not None:
      out.repeats[i, :m] = rest[1]
    if len(rest) > 2 and rest[2] is not None:
      out.searched[i, :len(rest[2])] = rest[2]
    if rest and rest[0] is not None:
      pinned, cap_groups, cap = rest[0]
      out.pinned[i, :len(pinned)] = pinned
      out.cap_groups[i, :m] = cap_groups
      out.caps[i] = cap
    if q_emb is not None:
      out.query[i, :q_emb.shape[0]] = q_emb
      out.query_valid[i, :q_emb.shape[0]] = True
    out.passages[i, :m] = p_emb
    out.symmetric[i, :m] = s_emb
    out.costs[i, :m] = costs
    out.valid[i, :m] = True
    if signals is not None:
      m = signals.mentioned.shape[0]
      sig.links[i, :m, :m] = signals.links
      sig.mentioned[i, :m] = signals.mentioned
      sig.entities[i, :m, :m] = signals.entities
      sig.groups[i, :m] = signals.groups
      sig.groups[i, m:] += ns
      if signals.overlap is not None:
        sig.overlap[i, :m] = signals.overlap
        sig.covered[i, :m, :m] = signals.covered
        sig.shared[i, :m, :m] = signals.shared
  return out


def stack(items: Sequence[NamedTuple]):
  """NamedTuples of host arrays (`Inputs`, `Settings`) stacked along a new leading `[B]` axis."""
  return type(items[0])(*(np.asarray(xs) for xs in zip(*items)))


@functools.partial(jax.jit, static_argnames=("config",))
def solve_batch(inputs: Inputs, settings: Settings, config: SolveConfig) -> Output:
  """`solve` `jax.vmap`-ed over a `[B]` batch, as one compiled function: a `vmap` of the jitted
  `solve` outside `jit` would trace its batching again at every call (milliseconds)."""
  return jax.vmap(functools.partial(solve, config=config))(inputs, settings)


def run(inputs: Inputs, settings: Settings, config: SolveConfig) -> Output:
  """`solve_batch` over a `[B]` batch (`pad_batch`, `stack`); NumPy out. The Pipeline runs
  every request this way, alone or not (`PipelineConfig.solve_rows`)."""
  return jax.tree.map(np.asarray, solve_batch(inputs, settings, config=config))


def picks(out: Output, *, n: int, k: Optional[int], min_gain: Optional[float] = None,
          pinned: int = 0) -> tuple:
  """(order, gains, curve) `[K]` of one request's `Output` with `n` real candidates: at most
  `k` picks, and with `min_gain` cut before the first gain below it past the first `pinned`
  picks (how the greedy baselines, which rank, honour it after the fact)."""
  count = min(int(out.count), n if k is None else min(int(k), n))
  order = np.asarray(out.order[:count], np.int64)
  gains, curve = np.asarray(out.gains[:count]), np.asarray(out.curve[:count])
  if min_gain is not None:
    low = np.nonzero(gains[pinned:] < min_gain)[0] + pinned
    if len(low):
      order, gains, curve = order[:low[0]], gains[:low[0]], curve[:low[0]]
  return order, gains, curve

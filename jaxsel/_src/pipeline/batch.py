"""The solve of prepared requests (`request.Prepared`), many at a time, and their results.

Shape legend: B requests, N candidates, K picks.

Each request is padded to its own shape buckets, as it would be alone (padding to a larger
size could reorder float sums and so break a near tie differently), and requests of the same
buckets and search choice are solved together, `solve_rows` at a time, in one `jax.vmap`-ed
program of `solve_rows` rows (a lone request padded by repeating it): one request and every
batch size run the same program, so a request gets the same floats however many requests
share its call. Its picks then become a `SelectionResult`: cut to its `k` and `min_gain`, at
sentence granularity kept within `k` passages and merged into runs (`granularity`), and
counted as sent (`reader.fit`).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from jaxsel._src import methods
from jaxsel._src.bridge import group_ids
from jaxsel._src.constraints import UNCAPPED
from jaxsel._src.numerics import ELEMENTWISE_NONNEG
from jaxsel._src.pipeline import granularity as granularity_lib
from jaxsel._src.pipeline import reader as reader_lib
from jaxsel._src.pipeline import solve as solve_lib
from jaxsel._src.pipeline.config import PipelineConfig
from jaxsel._src.pipeline.request import Prepared

if TYPE_CHECKING:  # guide.py imports this module
  from jaxsel._src.pipeline.guide import Guide
from jaxsel._src.pipeline.result import SelectionResult
from jaxsel._src.search import raise_if_nonfinite


def _pinned_only(cons: Optional[tuple]) -> Optional[tuple]:
  """`cons` (`candidates.constraints`) with its pinned and no group caps."""
  if cons is None:
    return None
  return cons[0], np.full(len(cons[1]), -1, np.int32), UNCAPPED


def _certificate(out: solve_lib.Output, method: str) -> dict:
  """The result fields saying how good the picks are: greedy's bound and certified ratio, or
  whether the CORAG search was exhaustive and its estimate (None where not known)."""
  def known(x):
    return None if np.isnan(x) else float(x)

  if method == "corag":
    return {"exhausted": bool(out.exhausted), "searched": known(out.searched),
            "estimate": known(out.estimate)}
  return {"bound": known(out.bound), "certified": known(out.certified)}


def _solve_k(cfg: PipelineConfig, r: Prepared) -> Optional[int]:
  """The `k` the solve itself honours: greedy's (static: its certificate is the bound for k
  picks); at sentence granularity none (`k` counts passages: `granularity.within`)."""
  return None if r.sentences or cfg.method not in methods.SUBMODULAR else r.k


def _solve_config(cfg: PipelineConfig, r: Prepared, *, n: int,
                  min_gain) -> solve_lib.SolveConfig:
  """The static settings of `r`'s solve over `n` (padded) candidates. Only greedy's `k` is
  static; CORAG, NaiveRAG and MMR take theirs at run time (`Settings.limit`) under a depth of
  all `n`, so a new `k` compiles nothing."""
  dense = (cfg.method not in methods.SUBMODULAR or n <= cfg.dense_limit
           or cfg.nonneg not in ELEMENTWISE_NONNEG)
  k = _solve_k(cfg, r)
  k = n if k is None else min(int(k), n)
  return solve_lib.SolveConfig(
      method=cfg.method, k=k, depth=min(k, cfg.max_depth or n), greedy_method=cfg.greedy_method,
      scorer=r.scorer, iterations=r.iterations, nonneg=cfg.nonneg, dense=dense,
      backend=cfg.backend, knapsack=bool(np.isfinite(r.budget)),
      use_min_gain=min_gain is not None and cfg.method in methods.SUBMODULAR,
      # At sentence granularity CORAG's top-up runs after the solve (`granularity.fill`).
      top_up=cfg.method == "corag" and cfg.top_up and not r.sentences,
      constrained=r.constraints is not None, widen=r.widening > 0,
      width=None if r.searched is None else cfg.search_width)


def solve(cfg: PipelineConfig, requests: Sequence[Prepared], *, min_gain) -> list:
  """`solve.Output` (NumPy) of each request (see the module docstring)."""
  groups = collections.defaultdict(list)
  for i, r in enumerate(requests):
    groups[(solve_lib.bucket(len(r.candidates.passages)), solve_lib.query_bucket(len(r.queries)),
            r.scorer, r.iterations, bool(np.isfinite(r.budget)), r.constraints is not None,
            r.widening > 0, r.searched is not None, r.sentences, _solve_k(cfg, r),
            r.candidates.embeddings.shape[1])].append(i)
  outs = [None] * len(requests)
  for (n_pad, q_pad, *_), rows in groups.items():
    # The picks are cut to each request's own k afterwards.
    config = _solve_config(cfg, requests[rows[0]], n=n_pad, min_gain=min_gain)
    for start in range(0, len(rows), cfg.solve_rows):
      part = rows[start:start + cfg.solve_rows]
      full = [requests[i] for i in part + [part[-1]] * (cfg.solve_rows - len(part))]
      # At sentence granularity `k` and the group caps count passages: the solve runs without
      # them (`granularity.within` keeps its picks while they hold; the pinned stay).
      inputs = solve_lib.pad_batch(
          [(r.query_embeddings, r.candidates.embeddings, r.candidates.symmetric,
            r.candidates.costs, r.signals,
            _pinned_only(r.constraints) if r.sentences else r.constraints, r.repeats, r.searched)
           for r in full], n=n_pad, q=q_pad, w=config.width)
      settings = solve_lib.stack([solve_lib.Settings.of(
          budget=r.budget, min_gain=min_gain, discount=cfg.discount, exploration=r.exploration,
          cost_penalty=r.cost_penalty, diversity=cfg.diversity, widening=r.widening,
          limit=None if r.sentences else r.k) for r in full])
      out = solve_lib.run(inputs, settings, config)
      for b, i in enumerate(part):
        outs[i] = solve_lib.row(out, b)
  return outs


def _links(r: Prepared) -> dict:
  """The text signals' `links` `[N, N]` and `groups` `[N]` over all of `r`'s candidates (the
  sentence top-up's): those of the searched ones, where the search had a width (no links from
  or to the others; the groups of all, `bridge.group_ids`)."""
  sig = r.signals
  if sig is None:
    return {"links": None, "groups": None}
  if r.searched is None:
    return {"links": sig.links, "groups": sig.groups}
  ps, idx = r.candidates.passages, r.searched
  links = np.zeros((len(ps), len(ps)), np.float32)
  links[np.ix_(idx, idx)] = sig.links
  return {"links": links, "groups": group_ids([p.doc for p in ps], [p.title for p in ps])}


def result(cfg: PipelineConfig, counter, r: Prepared, out: solve_lib.Output, *,
           min_gain, guide: Optional[Guide] = None) -> SelectionResult:
  """`r`'s `SelectionResult` from its solve's `out`, counted in `counter` as sent; at sentence
  granularity CORAG's top-up sends the `guide`'s passages' sentences first (`guide.Guide`)."""
  passages, k = r.candidates.passages, r.k
  raise_if_nonfinite(out.nonfinite, solve_lib.BASELINE_SCORERS.get(cfg.method, r.scorer),
                     what=f"this request's {cfg.method!r} selection")
  # A searched order is not a greedy ranking (a later chunk may pay off only after an
  # earlier one), so `min_gain` cuts only the greedy baselines after the fact.
  order, gains, curve = solve_lib.picks(
      out, n=len(passages), k=None if r.sentences else k,
      min_gain=min_gain if cfg.method in methods.BASELINES else None,
      pinned=0 if r.constraints is None else len(r.constraints[0]))
  if r.sentences:  # `k` and the caps count passages
    order, gains, curve = granularity_lib.within((order, gains, curve), r.candidates.parents,
                                                 k=k, constraints=r.constraints)
  rel = out.relevance[:len(r.queries), :len(passages)] if r.queries else None

  def build(order, gains, curve, budget=r.budget):
    picked = [passages[i] for i in order]
    res = SelectionResult(
        method=cfg.method, queries=r.queries, passages=picked, indices=order,
        scores=None if rel is None else rel.max(axis=0)[order],
        gains=gains.astype(np.float32), curve=curve.astype(np.float32),
        cost=int(sum(p.tokens for p in picked)),
        budget=float(r.budget) if np.isfinite(r.budget) else None, candidates=passages,
        candidate_scores=rel, documents=r.candidates.documents, unit=cfg.unit,
        **_certificate(out, cfg.method))
    if not r.sentences:
      return res
    return granularity_lib.merge(res, r.candidates.parents, r.candidates.units, counter, budget,
                                 own_costs=r.candidates.sent is None)

  if not r.sentences or cfg.method != "corag" or not cfg.top_up:
    res = build(order, gains, curve)
  else:
    c = r.candidates
    res = granularity_lib.top_up(
        build, (order, gains, curve), costs=c.costs, relevance=rel.max(axis=0),
        parents=c.parents, budget=r.budget, k=k, constraints=r.constraints, skip=r.repeats,
        guide=None if guide is None else guide.passages, guide_whole=cfg.guide_whole,
        extra=None if guide is None else guide.extra, **_links(r),
        sent_cost=None if c.sent is None else lambda res: reader_lib.sent_cost(res, counter))
  if r.candidates.sent is None:  # the caller's costs
    return res
  # Counted as sent (and trimmed to the budget) for the candidates the pipeline counted.
  return reader_lib.fit(res, counter, r.budget if np.isfinite(r.budget) else None)

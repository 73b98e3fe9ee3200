"""The passage guide of a sentence request: which passages its sentences come from first.

Shape legend: M passages, G guide passages.

At ``granularity="sentence"`` CORAG searches a request's sentences and its top-up fills the
rest of the budget with sentences (`granularity.fill`). Over ~100 sentences the search stops a
few picks deep, often in a passage that only looks relevant, and the top-up then completes
that passage. So the request's passages are also searched whole, with the same method,
scorer and text signals, for `PipelineConfig.guide` of them (default 2: a multi-hop question's
two hops) and no budget: no cost steers this search to short passages (2WikiMultihopQA's gold
paragraphs are long and its distractors short). The top-up sends the guide's lead sentences
right after the pinned picks and completes the guide's passages before the searched ones, or,
when the budget has room for them (`PipelineConfig.guide_whole`), sends them whole first,
then the next passage of a search for one more (`guide_extra`) whole if the budget holds it.
Measured in `training/RESULTS.md` (Granularity, the passage guide). It costs an embedding of
each passage beside its sentences (cached like any other; none for an index's passages, whose
embeddings the index holds) and two small solves per request (for `guide` passages and for
`guide` + `guide_extra`, the second only where the request has more passages than `guide`),
batched with the other requests' guides. A request of more sentences than CORAG searches
(`search_width`: a reranking request of 1,000 documents) guides with the passages of the
sentences it searches.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from jaxsel._src.pipeline import batch as batch_lib
from jaxsel._src.pipeline import candidates as cands_lib
from jaxsel._src.pipeline import request as request_lib
from jaxsel._src.pipeline import solve as solve_lib
from jaxsel._src.pipeline.request import Prepared


def requests(pipe, prepared: Sequence[Prepared]) -> list:
  """Each request's guide: `(request, rows)`, its passages `rows` (`[M']` indices of its
  passages) as a `Prepared` request for `pipe.config.guide` of them without a budget, or None
  (not a CORAG request at sentence granularity with a top-up and a query, or `guide` 0). The
  rows are every passage, or on a request wider than the search (`Prepared.searched`: a
  reranking request's thousands of sentences) the passages of the sentences it searches: the
  others are neither embedded nor searched."""
  cfg = pipe.config
  out = []
  for r in prepared:
    if not (r.sentences and cfg.method == "corag" and cfg.top_up and cfg.guide and r.queries):
      out.append(None)
      continue
    c = r.candidates
    rows = (np.arange(len(c.units)) if r.searched is None
            else np.unique(np.asarray(c.parents)[np.asarray(r.searched)]))
    units = [c.units[m] for m in rows]
    held = (None, None) if c.units_embedded is None else tuple(  # an index's, as it holds them
        a[rows] for a in c.units_embedded)
    whole = cands_lib.Candidates(units, *held, c.documents,
                                 sent=np.asarray([p.tokens for p in units], np.float32))
    whole = cands_lib.embedded(whole, pipe.embedder, late_chunking=pipe.late_chunking)
    request = request_lib.Request(r.queries, granularity="passage", k=min(cfg.guide, len(units)))
    out.append((request_lib.ready(pipe, request, whole, r.query_embeddings, float("inf"), None),
                rows))
  return out


class Guide(NamedTuple):
  """A request's guide: the `passages` `[G]` its search picked, in order, and `extra` `[E]`:
  the first `PipelineConfig.guide_extra` passages that a search for that many more picks
  found beyond them (sent whole after the guide's when the budget holds them,
  `granularity.fill`)."""
  passages: np.ndarray
  extra: np.ndarray


def solve(cfg, guides: Sequence[Optional[tuple]]) -> list:
  """Each request's `Guide`, or None where there is no guide. The guides (`requests`) are
  solved together, without CORAG's top-up: they name the passages the search found, no more;
  with `guide_extra`, each is also searched for that many more picks, in the same batch."""
  present = [i for i, g in enumerate(guides) if g is not None]
  out = [None] * len(guides)
  if not present:
    return out
  asked = [guides[i][0] for i in present]
  # The search for more picks, where the request has more passages than the guide takes.
  longer = {j: r._replace(k=min(r.k + cfg.guide_extra, len(r.candidates.passages)))
            for j, r in enumerate(asked) if cfg.guide_extra and r.k < len(r.candidates.passages)}
  solved = batch_lib.solve(cfg.replace(top_up=False), asked + list(longer.values()),
                           min_gain=None)
  solved_longer = dict(zip(longer, solved[len(asked):]))

  def order(request: Prepared, o, rows: np.ndarray) -> np.ndarray:
    picks, _, _ = solve_lib.picks(o, n=len(request.candidates.passages), k=request.k)
    return rows[np.asarray(picks, np.int64)]

  for j, i in enumerate(present):
    rows = guides[i][1]
    picked = order(asked[j], solved[j], rows)
    more = order(longer[j], solved_longer[j], rows) if j in longer else picked[:0]
    out[i] = Guide(picked, more[~np.isin(more, picked)][:cfg.guide_extra])
  return out

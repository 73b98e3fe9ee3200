"""One request to a `Pipeline`, as a value, and the stages that make it ready to solve.

Shape legend: Q queries, N candidates, D embedding dimension, W searched candidates.

`Pipeline.select` and `select_many` build `Request`s and call `prepare`, which runs every
request through the same three stages, so a request gets the same candidates, checks and
embeddings whichever of the two it came through:

1. `_checked`: the candidates without embeddings (documents split, the caller's passages or
   embeddings, or an index's hits), cut into sentences at ``granularity="sentence"``, their
   costs, the budget and the constraints: every argument is checked, for every request,
   before anything is embedded;
2. `_embedded`: the passages and the queries embedded (each request on its own: an encoder's
   float sums depend on what shares a batch, and a last-bit difference can swap a near tie);
3. `ready`: the search's settings (the agent's, when there is one), the repeated texts, the
   candidates the CORAG search sees (`width.searched`) and their text signals.

`batch.solve` then solves the `Prepared` requests together.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from jaxsel._src import methods
from jaxsel._src.index import VectorIndex
from jaxsel._src.pipeline import candidates as cands_lib
from jaxsel._src.pipeline import granularity as granularity_lib
from jaxsel._src.pipeline import reader as reader_lib
from jaxsel._src.pipeline import width as width_lib
from jaxsel.defaults import DEFAULT_GRANULARITY


class Request(NamedTuple):
  """What one selection is asked: `Pipeline.select`'s arguments (see there), as one value.

  `where` is None for `select`; for `select_many` the request's position, which its error
  messages name (``requests[2].pinned``, ``embeddings[2]``)."""
  queries: list  # [Q] checked strings (`candidates.as_queries`)
  documents: Any = None  # documents, `Passage`s, a `VectorIndex`, or None (the pipeline's index)
  budget: Optional[float] = None
  k: Optional[int] = None
  granularity: str = DEFAULT_GRANULARITY
  pinned: Any = None
  groups: Any = None
  max_per_group: Optional[int] = None
  embeddings: Any = None  # [N, D] the caller's, one row per item of `documents`
  query_embeddings: Any = None  # [Q, D]
  sources: Any = None
  where: Optional[int] = None


class Prepared(NamedTuple):
  """One request, checked and embedded, ready to pad and solve."""
  queries: list  # [Q] strings
  candidates: cands_lib.Candidates
  query_embeddings: Optional[np.ndarray]  # [Q, D]; None for text selection
  budget: float  # inf: no budget
  k: Optional[int]  # the most picks (passages at granularity "sentence"), None: no limit
  granularity: str  # "passage" or "sentence" (`candidates.parents` then says whose sentence)
  scorer: object = None  # the CORAG scorer (None for the other methods)
  iterations: int = 1
  exploration: float = 0.0
  cost_penalty: float = 0.0
  signals: object = None  # `bridge.BridgeSignals` or None
  constraints: Optional[tuple] = None  # `candidates.constraints`: (pinned, cap_groups, cap)
  repeats: Optional[np.ndarray] = None  # CORAG: `candidates.repeats` [N], or None
  widening: float = 0.0  # CORAG's progressive widening (a wide request: `PipelineConfig.widening`)
  # CORAG over more than `search_width` candidates: the `[W]` it searches (`width.searched`;
  # `signals` are theirs), else None.
  searched: Optional[np.ndarray] = None

  @property
  def sentences(self) -> bool:
    return self.granularity == "sentence"


def per_request(requests, **lists) -> dict:
  """`select_many`'s and `pick_many`'s arguments of one entry per request, checked: the
  requests as `(queries, documents)` pairs, each of `lists` as a list (None: None for each)."""
  requests = list(requests)
  if not requests:
    raise ValueError("`requests` is empty; pass a list of (queries, documents) pairs.")
  for r, req in enumerate(requests):
    if not isinstance(req, (tuple, list)) or len(req) != 2:
      raise TypeError(f"`requests[{r}]` must be a (queries, documents) pair.")
  out = {}
  for name, per in lists.items():
    if per is not None and (isinstance(per, (str, bytes)) or len(per) != len(requests)):
      raise ValueError(f"`{name}` must hold one entry per request ({len(requests)}), or be None.")
    out[name] = [None] * len(requests) if per is None else list(per)
  return {"requests": requests, **out}


def _named(where: Optional[int], what: str, fn, *args, **kwargs):
  """`fn(...)`, its TypeError / ValueError prefixed with `what[where]` in a batch."""
  if where is None:
    return fn(*args, **kwargs)
  try:
    return fn(*args, **kwargs)
  except (TypeError, ValueError) as e:
    raise type(e)(f"`{what}[{where}]`: {e}") from None


def prepare(pipe, requests: list) -> list:
  """The `Prepared` request of each `Request`, for `pipe` (a `Pipeline` with a method): all
  are checked before any is embedded."""
  checked = [_checked(pipe, r) for r in requests]
  return [ready(pipe, r._replace(granularity=granularity), *_embedded(pipe, r, cands), budget,
                 cons) for r, (cands, budget, cons, granularity) in zip(requests, checked)]


def _source(pipe, r: Request):
  if r.documents is None and r.embeddings is None:
    if pipe.index is None:
      raise ValueError("No documents: pass `documents_or_index` (documents, passages or a "
                       "VectorIndex) or build the Pipeline with `index=`.")
    return pipe.index
  return r.documents


def _checked(pipe, r: Request) -> tuple:
  """(candidates, without embeddings where the pipeline embeds them; the budget as a float;
  the constraints or None; the granularity, "auto" resolved) of `r`."""
  cfg, counter = pipe.config, pipe.tokenizer
  cands_lib.check_queries(cfg.method, r.queries)
  source = _source(pipe, r)
  index = isinstance(source, VectorIndex) and r.embeddings is None
  if r.embeddings is not None:  # a framework's nodes: each costs its own tokens
    cands = _named(r.where, "embeddings", cands_lib.from_embeddings, source, r.embeddings,
                   counter)
  elif index:
    cands = cands_lib.from_index(source, r.queries, pipe.embedder, counter,
                                 candidates=cfg.candidates)
  else:
    split = lambda docs: pipe.split(docs, sources=r.sources, budget=r.budget)  # noqa: E731
    cands = _named(r.where, "requests", cands_lib.from_documents, source, split)
  counted = index or cands.documents is not None  # by the pipeline: as sent

  def sent(c: cands_lib.Candidates) -> cands_lib.Candidates:
    if not counted:
      return c
    return c._replace(sent=reader_lib.candidate_costs(
        counter, [p.sent_text for p in c.passages], unit=cfg.unit))

  granularity = r.granularity
  if granularity == "auto":
    cands = sent(cands)
    granularity = resolved_granularity(r, cands, unit=cfg.unit)
  if granularity == "sentence":  # the sentences, not yet counted
    cands = cands_lib.expanded(cands, lambda ps: granularity_lib.sentences(ps, counter))
  if cands.sent is None:
    cands = sent(cands)
  budget = cands_lib.check_budget(r.budget, r.k, cands.costs)
  name = "" if r.where is None else f"requests[{r.where}]."
  cons = cands_lib.constraints(cands, r.pinned, r.groups, r.max_per_group, budget=budget, k=r.k,
                               index=index, name=name)
  depth = cfg.max_depth
  if cons is not None and depth is not None and cfg.method not in methods.SUBMODULAR \
      and len(cons[0]) > depth:
    raise ValueError(f"`{name}pinned` holds {len(cons[0])} passages, more than `max_depth`="
                     f"{depth} of method {cfg.method!r} allows.")
  return cands, budget, cons, granularity


def resolved_granularity(r: Request, cands: cands_lib.Candidates, *, unit: str) -> str:
  """`r`'s granularity, ``"auto"`` resolved by `granularity.resolve` from its budget and its
  candidates' costs as sent."""
  return granularity_lib.resolve(r.granularity, budget=r.budget, costs=cands.costs,
                                 embeddings=r.embeddings is not None, unit=unit)


def _embedded(pipe, r: Request, cands: cands_lib.Candidates) -> tuple:
  """(`cands` with embeddings, the `[Q, D]` query embeddings or None)."""
  cands = cands_lib.embedded(cands, pipe.embedder, late_chunking=pipe.late_chunking)
  q = None
  if r.queries or r.query_embeddings is not None:
    q = _named(r.where, "query_embeddings", cands_lib.query_embeddings, r.queries,
               r.query_embeddings, cands.embeddings.shape[1], pipe.embedder)
  return cands, q


def ready(pipe, r: Request, cands, q_emb, budget: float, cons: Optional[tuple]) -> Prepared:
  """The request with its search settings (the agent's, when there is one), text signals and,
  for CORAG, its repeated texts (`candidates.repeats`) and the candidates it searches."""
  cfg = pipe.config
  base = Prepared(r.queries, cands, q_emb, budget, r.k, r.granularity,
                  exploration=cfg.exploration, cost_penalty=cfg.cost_penalty, constraints=cons)
  if cfg.method != "corag":
    return base
  if pipe.agent is None:
    scorer, it, c, lam = cfg.corag_scorer, cfg.iterations, cfg.exploration, cfg.cost_penalty
  else:
    choice = pipe.agent.predict(np.mean(np.asarray(q_emb, np.float32), axis=0))
    scorer, it, c, lam = choice.scorer, choice.iterations, choice.exploration, choice.cost_penalty
  repeats = cands_lib.repeats(cands.passages, cons)
  pinned = () if cons is None else cons[0]
  searched = None
  if len(pinned) <= cfg.search_width // 2:  # else the search runs over all candidates
    searched = width_lib.searched(q_emb, cands.embeddings, cands.symmetric,
                                  width=cfg.search_width, pinned=pinned, skip=repeats)
  seen = cands.passages if searched is None else [cands.passages[i] for i in searched]
  signals = None
  if callable(scorer) or scorer in methods.USES_TEXT_SIGNALS:
    signals = text_signals(pipe, r.queries, seen)
  wide = len(seen) > cfg.widen_above
  return base._replace(scorer=scorer, iterations=int(it), exploration=c, cost_penalty=lam,
                       signals=signals, repeats=repeats,
                       widening=cfg.widening if wide else 0.0, searched=searched)


def text_signals(pipe, queries: list, passages: list):
  """`methods.text_signals` of a request (tens of milliseconds of Python for 20 passages),
  kept in the embedding cache beside the request's embeddings: a repeated request (`select`
  or `select_many`) reads them back."""
  texts, docs, titles = (tuple(p.text for p in passages), tuple(p.doc for p in passages),
                         tuple(p.title for p in passages))
  embedder = pipe.embedder
  return embedder.cache.get(("text signals", tuple(queries), texts, docs, titles),
                            lambda: methods.text_signals(texts, docs, titles, queries),
                            size=embedder.cache_size)

"""The server's JAX work: rerank requests ranked or selected with a `jaxsel.Pipeline`, many at
a time. Everything here runs on the one worker thread (`batcher.MicroBatcher`), so the
pipeline, its encoder and its embedding cache are never used by two threads at once.

Shape legend: B requests, N documents, D embedding dimension.

A request without `budget_tokens` or `method` is ranked like a reranker: NaiveRAG without a
budget over the cosine of the query and each document (shifted to [0, 1], the same order;
`pinned` and group caps honoured; blank documents ranked too), answered with the raw cosine.
With them it is selected by its method. Either way the request goes to the library's front for
applications, `Pipeline.pick_many` (each document one candidate costing its tokens in the
pipeline's reader tokenizer; the constraints checked there; picks naming documents), and
requests that share its settings (method, budget, `top_n`, `max_per_group`, granularity) go
through one call, whose solves run in one compiled program of `SOLVE_ROWS` rows whatever the
batch size (`PipelineConfig.solve_rows`), so that every request, alone or in a batch, gets the
same answer. The server's encoder embeds each request on its own, as `select` does.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Optional, Sequence

import numpy as np

import jaxsel
from jaxsel.defaults import DEFAULT_GRANULARITY, DEFAULT_MAX_PROGRAMS
from jaxsel.serve.programs import ProgramBound

log = logging.getLogger("jaxsel.serve")

RANKING = "ranking"  # `Engine.pipe`'s name for a request without budget or method


class RequestError(ValueError):
  """A request the server refuses: the HTTP `status` and the `field` at fault."""

  def __init__(self, message: str, field: Optional[str] = None, status: int = 422):
    super().__init__(message)
    self.field = field
    self.status = status


@dataclasses.dataclass(frozen=True, eq=False)
class Job:
  """One checked rerank request."""
  query: str
  texts: tuple  # [N] document texts
  top_n: Optional[int] = None
  select: bool = False  # selected (budget or method given), else ranked
  budget: Optional[int] = None
  method: Optional[str] = None
  pinned: Optional[tuple] = None  # [P] document indices
  groups: Optional[tuple] = None  # [N] labels
  max_per_group: Optional[int] = None
  embeddings: Optional[np.ndarray] = None  # [N, D] float32, the caller's
  query_embedding: Optional[np.ndarray] = None  # [D]
  max_tokens_per_doc: Optional[int] = None
  granularity: str = DEFAULT_GRANULARITY
  titles: Optional[tuple] = None  # [N] a title (str) or None per document; None: no titles

  @property
  def documents(self) -> list:
    """What `Pipeline.pick` takes: the texts, or `{"text", "title"}` records with titles."""
    if self.titles is None:
      return list(self.texts)
    return [t if ti is None else {"text": t, "title": ti} for t, ti in zip(self.texts, self.titles)]

  @property
  def constrained(self) -> bool:
    return self.pinned is not None or self.max_per_group is not None


@dataclasses.dataclass
class Pick:
  index: int
  relevance: float
  cost: Optional[int] = None
  gain: Optional[float] = None
  start: Optional[int] = None  # a part of the document (granularity "sentence"), else None
  end: Optional[int] = None
  prefix: str = ""  # what is counted before a part: "title: " where it does not hold the title


@dataclasses.dataclass
class Outcome:
  """What a request gets back: its picks in order, the tokens it read, its selection."""
  picks: list
  total_tokens: int
  selection: Optional[dict] = None


@dataclasses.dataclass
class _Prepared:
  job: Job
  query_tokens: int
  costs: Sequence[int] = ()  # [N] every document's tokens


# The server's solves run in programs of 4 rows (`PipelineConfig.solve_rows`): a request alone
# costs 4.1 ms of engine time, one in a batch of 32 2.9 ms (1 row: no batching of solves; 8 rows:
# 13.5 and 5.9 ms).
SOLVE_ROWS = 4


class Engine:
  """Ranks and selects batches of `Job`s with `pipeline` (`method`: the default method of a
  selection; None: the pipeline's, else `jaxsel.default_method`). Once `max_programs` compiled
  programs were loaded, it frees them all between two batches (`ProgramBound`)."""

  def __init__(self, pipeline: "jaxsel.Pipeline", *, method: Optional[str] = None,
               max_batch: int = 32, max_programs: int = DEFAULT_MAX_PROGRAMS):
    # The cache keeps the texts of a batch (a ranking's two entries: its documents and its
    # query), so the cosines of a ranking read them back. A sentence selection adds its
    # guide's passages and text signals: in a full batch of those a ranking's documents may
    # be embedded again (the same cosines, more time); entries are not bounded in bytes.
    self.pipeline = pipeline.replace(cache_size=max(pipeline.config.cache_size, 4 * max_batch),
                                     solve_rows=SOLVE_ROWS)
    self.method = method or pipeline.method or jaxsel.default_method(True)
    self.max_batch = max_batch
    self.programs = ProgramBound(max_programs)
    self._pipes = {}

  def pipe(self, method: str) -> "jaxsel.Pipeline":
    """The pipeline with `method` (sharing the encoder and the embedding cache). `RANKING`:
    NaiveRAG over the cosines shifted to [0, 1] (the same order), no pick cut by its gain."""
    if method not in self._pipes:
      self._pipes[method] = (self.pipeline.replace(method="naive", nonneg="shift", min_gain=None,
                                                   max_depth=None) if method == RANKING
                             else self.pipeline.replace(method=method))
    return self._pipes[method]

  # -- the batch -------------------------------------------------------------------------------
  def run(self, jobs: Sequence[Job]) -> list:
    """An `Outcome` or the exception it raised, for each job; one failing job fails alone.

    Jobs that share a solve (`_key`) go through one `Pipeline.select_many`: a ranking is
    NaiveRAG without a budget, a selection its method's solve."""
    outs = self._prepare_all(jobs)
    batches = collections.defaultdict(list)
    for i, out in enumerate(outs):
      if isinstance(out, _Prepared):
        batches[self._key(out)].append(i)
    for rows in batches.values():
      try:
        results = self._select_many([outs[i] for i in rows])
      except Exception:  # noqa: BLE001 -- one bad request: each alone, so only it fails
        results = [self._guard(lambda p: self._select_many([p])[0], outs[i]) for i in rows]
      for i, r in zip(rows, results):
        outs[i] = r
    if self.programs.check():
      log.info("jaxsel serve: freed the compiled programs (max_programs=%d loaded)",
               self.programs.limit)
    return outs

  @staticmethod
  def _guard(fn, arg):
    try:
      return fn(arg)
    except Exception as e:  # noqa: BLE001 -- handed back to the request that caused it
      if not isinstance(e, (ValueError, TypeError)):
        log.exception("request failed")
      return e

  def _key(self, p: "_Prepared") -> tuple:
    """What requests must share to go through one `pick_many`: the method and its settings
    (the library batches the solves of each shape itself)."""
    job = p.job
    return (job.select, self._method(job), job.budget, job.top_n, job.max_per_group,
            job.granularity)

  def _method(self, job: Job) -> str:
    return (job.method or self.method) if job.select else RANKING

  # -- one request -----------------------------------------------------------------------------
  def _prepare_all(self, jobs: Sequence[Job]) -> list:
    """A `_Prepared` (or the exception it raised) for each job: the texts of the whole batch
    are counted in one tokenizer call (a call per request cost 0.5 ms of a batched request's
    1.6 ms in the engine), each job alone when that call fails."""
    counter = self.pipeline.tokenizer
    jobs = [self._guard(self._truncated, job) for job in jobs]
    ok = [j for j in jobs if isinstance(j, Job)]
    try:
      counts = iter(counter.count([t for j in ok for t in (j.query, *j.texts)]).tolist())
    except Exception:  # noqa: BLE001 -- a bad text: each job alone, so only its own fails
      return [j if isinstance(j, Exception) else self._guard(self._prepare, j) for j in jobs]
    return [j if isinstance(j, Exception) else
            self._prepared(j, next(counts), [next(counts) for _ in j.texts]) for j in jobs]

  def _truncated(self, job: Job) -> Job:
    if job.max_tokens_per_doc is None:
      return job
    counter = self.pipeline.tokenizer
    return dataclasses.replace(job, texts=tuple(counter.truncate(t, job.max_tokens_per_doc)
                                                for t in job.texts))

  def _prepare(self, job: Job) -> _Prepared:
    counts = self.pipeline.tokenizer.count([job.query, *job.texts]).tolist()
    return self._prepared(job, counts[0], counts[1:])

  @staticmethod
  def _prepared(job: Job, query_tokens: int, costs: Sequence[int]) -> _Prepared:
    return _Prepared(job, int(query_tokens), [int(c) for c in costs])

  def _cosines(self, p: _Prepared) -> np.ndarray:
    """`[N]` cosine of the query and each document (the caller's embeddings, else the
    pipeline's, read back from its cache after the solve)."""
    job = p.job
    if job.embeddings is not None:
      e, q = job.embeddings, job.query_embedding
    else:
      e, q = self.pipeline.embed(job.texts, "passage"), self.pipeline.embed([job.query], "query")
    return np.asarray(jaxsel.cosine_similarity(np.reshape(q, (1, -1)), e, nonneg=None))[0]

  def _select_many(self, preps: Sequence[_Prepared]) -> list:
    """The requests through `Pipeline.pick_many`. A selection never picks a blank document
    (the library's rule); a ranking ranks every one, as a reranker does."""
    job = preps[0].job
    method = self._method(job)
    jobs = [p.job for p in preps]
    results = self.pipe(method).pick_many(
        [(None if method == "coverage" else j.query, j.documents) for j in jobs],
        budget=job.budget, k=job.top_n, granularity=job.granularity,
        max_per_group=job.max_per_group, pinned=[j.pinned for j in jobs],
        groups=[j.groups for j in jobs], costs=[p.costs for p in preps],
        keep=None if job.select else [[True] * len(j.texts) for j in jobs],
        embeddings=[j.embeddings for j in jobs],
        query_embeddings=[None if j.query_embedding is None else j.query_embedding[None]
                          for j in jobs])
    return [self._outcome(p, r) for p, r in zip(preps, results)]

  def _outcome(self, p: _Prepared, res) -> Outcome:
    """The request's answer from its `SelectionResult`: each pick names its document (an
    index into the request's `documents`, `res.picks`) and carries its relevance."""
    picks, texts = res.picks, p.job.texts
    if not p.job.select:  # a ranking: NaiveRAG's order, the cosine as any reranker gives it
      rel = self._cosines(p)
      return Outcome([Pick(q.document, float(rel[q.document])) for q in picks], self._total(p))
    # Text selection (coverage) saw no query: each document's cosine, as ranked.
    cosines = self._cosines(p) if res.scores is None else None
    out = [Pick(q.document, float(q.relevance if cosines is None else cosines[q.document]),
                q.tokens, q.gain,
                *(() if q.end - q.start == len(texts[q.document]) else (q.start, q.end, q.prefix)))
           for q in picks]
    selection = {"cost_tokens": int(res.cost), "budget_tokens": p.job.budget,
                 "method": res.method, "certified": res.certified}
    return Outcome(out, self._total(p), selection)

  @staticmethod
  def _total(p: _Prepared) -> int:
    return p.query_tokens + sum(p.costs)

  # -- start-up --------------------------------------------------------------------------------
  def warm_up(self, documents: Sequence[int] = (3,)) -> None:
    """Compiles what a first request would: the ranking and the default method's budgeted
    selection (one `SOLVE_ROWS`-row program each) for requests of each number of
    `documents` (their candidate buckets; client embeddings of the encoder's dimension share
    these programs). Raises what a warm-up request raised: a server that cannot answer it
    should not start."""
    for n in documents:
      if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`documents` must hold whole numbers >= 1 (documents a warm-up "
                         f"request holds), got {n!r}.")
      texts = tuple(f"Warm-up document number {i}." for i in range(n))
      budget = int(self.pipeline.tokenizer.count(texts).max()) * 2
      for out in self.run([Job("warm up", texts), Job("warm up", texts, select=True,
                                                          budget=budget)]):
        if isinstance(out, Exception):
          raise out

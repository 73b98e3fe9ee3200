"""The server's JAX work: rerank requests ranked or selected with a `jaxsel.Pipeline`, many at
a time. Everything here runs on the one worker thread (`batcher.MicroBatcher`), so the
pipeline, its encoder and its embedding cache are never used by two threads at once.

Shape legend: B requests, N documents, D embedding dimension.

A request without `budget_tokens` or `method` is ranked like a reranker: the cosine of the
query and each document (`Pipeline.embed` with the encoder's query and passage prompts).
With them it is selected: the documents become `jaxsel.Passage`s costing their tokens in the
pipeline's reader tokenizer, and requests of the same method, budget, `top_n` and candidate
bucket go through one `Pipeline.select_many` (one `jax.vmap`-ed solve), padded to a power of
two by repeating a request so that a batch of any size reuses one of a few compiled programs.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import logging
from typing import Optional, Sequence

import numpy as np

import jaxsel
from jaxsel._src.pipeline.solve import bucket

log = logging.getLogger("jaxsel.serve")

CONSTRAINTS = ("pinned", "groups", "max_per_group")


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

  @property
  def constrained(self) -> bool:
    return self.pinned is not None or self.max_per_group is not None


@dataclasses.dataclass
class Pick:
  index: int
  relevance: float
  cost: Optional[int] = None
  gain: Optional[float] = None


@dataclasses.dataclass
class Outcome:
  """What a request gets back: its picks in order, the tokens it read, its selection."""
  picks: list
  total_tokens: int
  selection: Optional[dict] = None


@dataclasses.dataclass
class _Prepared:
  job: Job
  passages: list  # [N] `jaxsel.Passage`s, each costing its tokens
  query_tokens: int


def _power_of_two(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


class Engine:
  """Ranks and selects batches of `Job`s with `pipeline` (`method`: the default method of a
  selection; None: the pipeline's, else `jaxsel.default_method`)."""

  def __init__(self, pipeline: "jaxsel.Pipeline", *, method: Optional[str] = None,
               max_batch: int = 32):
    self.pipeline = pipeline
    self.method = method or pipeline.method or jaxsel.default_method(True)
    self.max_batch = max_batch
    self._pipes = {}
    # Constraints in a selection need Pipeline.select(..., pinned=, groups=, max_per_group=).
    self.constraints = all(p in inspect.signature(pipeline.select).parameters for p in CONSTRAINTS)

  def pipe(self, method: str) -> "jaxsel.Pipeline":
    """The pipeline with `method` (sharing the encoder and the embedding cache)."""
    if method not in self._pipes:
      self._pipes[method] = self.pipeline.replace(method=method)
    return self._pipes[method]

  # -- the batch -------------------------------------------------------------------------------
  def run(self, jobs: Sequence[Job]) -> list:
    """An `Outcome` or the exception it raised, for each job; one failing job fails alone."""
    outs = [None] * len(jobs)
    prepared = {}
    for i, job in enumerate(jobs):
      outs[i] = self._guard(self._prepare, job)
      if isinstance(outs[i], _Prepared):
        prepared[i] = outs[i]
    batches = collections.defaultdict(list)
    for i, p in prepared.items():
      job = p.job
      if not job.select:
        outs[i] = self._guard(self._rank, p)
      elif job.embeddings is not None or job.constrained or job.method == "coverage":
        outs[i] = self._guard(self._select_one, p)
      else:
        key = (job.method or self.method, job.budget, job.top_n, bucket(len(p.passages)))
        batches[key].append(i)
    for rows in batches.values():
      for start in range(0, len(rows), self.max_batch):
        part = rows[start:start + self.max_batch]
        try:
          results = self._select_many([prepared[i] for i in part])
        except Exception:  # noqa: BLE001 -- one bad request: each alone, so only it fails
          results = [self._guard(lambda p: self._select_many([p])[0], prepared[i]) for i in part]
        for i, r in zip(part, results):
          outs[i] = r
    return outs

  @staticmethod
  def _guard(fn, arg):
    try:
      return fn(arg)
    except Exception as e:  # noqa: BLE001 -- handed back to the request that caused it
      if not isinstance(e, (ValueError, TypeError)):
        log.exception("request failed")
      return e

  # -- one request -----------------------------------------------------------------------------
  def _prepare(self, job: Job) -> _Prepared:
    counter = self.pipeline.tokenizer
    texts = list(job.texts)
    if job.max_tokens_per_doc is not None:
      texts = [_truncate(counter, t, job.max_tokens_per_doc) for t in texts]
      job = dataclasses.replace(job, texts=tuple(texts))
    costs = counter.count(texts) if texts else np.zeros(0, np.int64)
    passages = [jaxsel.Passage(t, 0, len(t), doc=i, tokens=int(c))
                for i, (t, c) in enumerate(zip(texts, costs))]
    return _Prepared(job, passages, int(counter.count_one(job.query)))

  def _cosines(self, p: _Prepared) -> np.ndarray:
    """`[N]` cosine of the query and each document."""
    job = p.job
    if job.embeddings is not None:
      e, q = job.embeddings, job.query_embedding
      e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
      q = q / max(float(np.linalg.norm(q)), 1e-12)
    else:
      q = self.pipeline.embed([job.query], "query")[0]
      e = self.pipeline.embed(list(job.texts), "passage")
    return (np.asarray(e, np.float32) @ np.asarray(q, np.float32)).astype(np.float32)

  def _rank(self, p: _Prepared) -> Outcome:
    job = p.job
    rel = self._cosines(p)
    order = list(job.pinned or ())
    taken = set(order)
    counts = collections.Counter(job.groups[i] for i in order) if job.groups else None
    for i in np.argsort(-rel, kind="stable"):
      i = int(i)
      if i in taken:
        continue
      if job.max_per_group is not None:
        if counts[job.groups[i]] >= job.max_per_group:
          continue
        counts[job.groups[i]] += 1
      order.append(i)
    if job.top_n is not None:
      order = order[:job.top_n]
    return Outcome([Pick(i, float(rel[i])) for i in order], self._total(p))

  def _select_one(self, p: _Prepared) -> Outcome:
    job = p.job
    method = job.method or self.method
    kwargs = {}
    if job.constrained:
      if not self.constraints:
        field = "pinned" if job.pinned is not None else "max_per_group"
        raise RequestError(f"`{field}` in a selection (with `budget_tokens` or `method`): the "
                           "constraint is not available in this build of jaxsel; without "
                           "`budget_tokens` and `method` the ranking honours it.", field)
      kwargs = dict(pinned=None if job.pinned is None else list(job.pinned),
                    groups=None if job.groups is None else list(job.groups),
                    max_per_group=job.max_per_group)
    if job.embeddings is not None:
      kwargs.update(embeddings=job.embeddings, query_embeddings=job.query_embedding[None])
    queries = None if method == "coverage" else job.query
    res = self.pipe(method).select(queries, p.passages, budget=job.budget, k=job.top_n, **kwargs)
    return self._outcome(p, res)

  def _select_many(self, preps: Sequence[_Prepared]) -> list:
    job = preps[0].job
    method = job.method or self.method
    requests = [(p.job.query, p.passages) for p in preps]
    # The batch axis is a static shape: padded to a power of two (repeating the last request,
    # whose embeddings are then cached), a batch of any size runs one of a few programs.
    requests += [requests[-1]] * (_power_of_two(len(requests)) - len(requests))
    results = self.pipe(method).select_many(requests, budget=job.budget, k=job.top_n)
    return [self._outcome(p, r) for p, r in zip(preps, results)]

  def _outcome(self, p: _Prepared, res) -> Outcome:
    rel = None
    if res.candidate_scores is not None:
      rel = np.asarray(res.candidate_scores, np.float32).max(axis=0)
    else:  # text selection (coverage) saw no query: the cosine, as ranked
      rel = self._cosines(p)
    picks = [Pick(int(i), float(rel[int(i)]), int(p.passages[int(i)].tokens), float(g))
             for i, g in zip(res.indices, res.gains)]
    selection = {"cost_tokens": int(res.cost), "budget_tokens": p.job.budget,
                 "method": res.method, "certified": res.certified}
    return Outcome(picks, self._total(p), selection)

  @staticmethod
  def _total(p: _Prepared) -> int:
    return p.query_tokens + sum(int(x.tokens) for x in p.passages)

  # -- start-up --------------------------------------------------------------------------------
  def warm_up(self) -> None:
    """Compiles what a first request would: the ranking, and the default method's budgeted
    selection batched by 1, 2, 4, ... up to `max_batch` (the smallest candidate bucket).
    Raises what a warm-up request raised: a server that cannot answer it should not start."""
    texts = ("Warm-up document one.", "Another warm-up document.", "A third one.")
    budget = int(self.pipeline.tokenizer.count(texts).max()) * 2
    jobs = [Job("warm up", texts)]
    size = 1
    while True:
      jobs += [Job("warm up", texts, select=True, budget=budget)] * size
      for out in self.run(jobs):
        if isinstance(out, Exception):
          raise out
      if size >= self.max_batch:
        break
      size, jobs = min(size * 2, self.max_batch), []


def _truncate(counter, text: str, limit: int) -> str:
  """`text` cut to its first `limit` tokens of `counter` (unchanged when it has no more)."""
  if counter.count_one(text) <= limit:
    return text
  if counter.has_spans:
    spans = counter.spans([text])[0]
    return text[:spans[limit - 1][1]] if len(spans) > limit else text
  lo, hi = 0, len(text)  # the longest prefix within the limit
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if counter.count_one(text[:mid]) <= limit:
      lo = mid
    else:
      hi = mid - 1
  return text[:lo]

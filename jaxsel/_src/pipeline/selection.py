"""`Pipeline`: from documents and queries to an ordered, budgeted context (`select`,
`select_many`), the documents' picks for an application (`pick`, `pick_many`) and an answer.

The Pipeline is a facade over the stage modules; each request goes through the same ones:
`request` (a request as a value: candidates from `candidates` and `granularity`, checks and
constraints, embeddings from `embedding`, the search's settings and `width`), `batch` (the
compiled `solve`, many requests at a time, and the `SelectionResult`), `reader` (costs as
sent, the prompt) and `front` (documents in, picks naming them out).
"""

from __future__ import annotations

import collections
import copy
from typing import Optional, Sequence

import numpy as np

from jaxsel._src.base import Configurator, Encoder, Generator
from jaxsel._src.generation import DEFAULT_MAX_NEW_TOKENS, generator_counter
from jaxsel._src.index import VectorIndex
from jaxsel._src.methods import default_method
from jaxsel._src.pipeline import batch as batch_lib
from jaxsel._src.pipeline import candidates as cands_lib
from jaxsel._src.pipeline import front
from jaxsel._src.pipeline import granularity as granularity_lib
from jaxsel._src.pipeline import guide as guide_lib
from jaxsel._src.pipeline import reader as reader_lib
from jaxsel._src.pipeline import request as request_lib
from jaxsel._src.pipeline.config import PipelineConfig
from jaxsel._src.pipeline.embedding import Embedder, EmbeddingCache, check_late_chunking
from jaxsel._src.pipeline.request import Request
from jaxsel._src.pipeline.result import Answer, SelectionResult
from jaxsel._src.scorers.hops import load_hop_params
from jaxsel._src.tokens import TokenCounter, token_counter
from jaxsel.defaults import DEFAULT_GRANULARITY


class Pipeline:
  """Selects the passages that belong in an LLM's context window, in order, within a budget.

  Example:
    >>> enc = jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")
    >>> pipe = jaxsel.Pipeline(enc)  # CORAG for a question, coverage without one
    >>> res = pipe.select("Who wrote it?", [document], budget=256)
    >>> print(res.table()); llm(res.prompt())

  Args:
    encoder: a `jaxsel.Encoder` (`jaxsel.load_encoder` returns one): `encode(texts, *,
      prompt_name, normalize, batch_size, progress) -> [N, D]`, its `prompts` and the
      Hugging Face `tokenizer` that token costs come from.
    index: a default `VectorIndex` to select from when `select` gets no documents.
    method: one of `available_methods()` (see `PipelineConfig`); None (the default) picks
      per request, by `jaxsel.default_method`: ``"corag"`` (the tree search with the learned
      second-hop scorer, the best measured on multi-hop QA) when there is a question,
      ``"coverage"`` (text selection) when there is none.
    agent: what picks the CORAG scorer and search settings per request from the query
      embedding (the mean over the queries): a trained `jaxsel.contrib.ConfigAgent`, or any object
      with `predict(features [D]) -> choice` (`scorer`, `iterations`, `exploration`,
      `cost_penalty`).
    generator: what `answer` asks (`jaxsel.load_generator(...)`, or an `OpenAIGenerator`);
      default: the offline SmolLM2-135M-Instruct, loaded at the first `answer`.
    tokenizer: the reader's tokenizer, what every budget and `max_tokens` is counted in:
      anything `jaxsel.token_counter` takes (a Hugging Face or tiktoken tokenizer, a name or
      path, a callable `texts -> counts`). Default: the generator's own tokenizer when there is
      a generator (`answer` always counts with its generator's), else the encoder's (word
      pieces of all-MiniLM-L6-v2: the LLM reading the context counts differently, so name it).
    config: a `PipelineConfig`; keyword `settings` (the same names) override its fields.
  """

  def __init__(self, encoder: Encoder, index: Optional[VectorIndex] = None,
               method: Optional[str] = None, *, agent: Optional[Configurator] = None,
               generator: Optional[Generator] = None, config: Optional[PipelineConfig] = None,
               tokenizer=None, **settings):
    if encoder is None or not callable(getattr(encoder, "encode", None)):
      raise TypeError("`encoder` must have an `encode(texts, ...)` method, e.g. "
                      "`jaxsel.load_encoder(name_or_path)`.")
    if index is not None and not isinstance(index, VectorIndex):
      raise TypeError(f"`index` must be a jaxsel VectorIndex or None, got {type(index).__name__}.")
    if agent is not None and not isinstance(agent, Configurator):
      raise TypeError(f"`agent` must be a jaxsel ConfigAgent (`jaxsel.load_agent`) or have "
                      f"`predict(features) -> choice`, got {type(agent).__name__}.")
    if generator is not None and not isinstance(generator, Generator):
      raise TypeError(f"`generator` must have `generate(prompts, *, max_new_tokens)` and `name` "
                      f"(`jaxsel.load_generator`), got {type(generator).__name__}.")
    if method is not None:
      settings["method"] = method
    self.encoder = encoder
    self.index = index
    self.agent = agent
    self.generator = generator
    self.reader = None if tokenizer is None else token_counter(tokenizer)
    self.config = (config or PipelineConfig()).replace(**settings)
    if self.config.method in (None, "corag") and self.config.corag_scorer == "learned_hops":
      load_hop_params()  # cached; missing or damaged weights fail here, naming the file
    self._cache = EmbeddingCache()
    self._check_late_chunking()

  @property
  def method(self) -> Optional[str]:
    """The selection method (`config.method`); None: chosen per request (`method_for`)."""
    return self.config.method

  def method_for(self, queries) -> str:
    """The method a request with `queries` is selected with: this pipeline's, else the default
    for a request with or without a question (`jaxsel.default_method`)."""
    if self.config.method is not None:
      return self.config.method
    return default_method(bool(cands_lib.as_queries(queries)))

  def resolved(self, queries) -> "Pipeline":
    """This pipeline when it has a method, else a copy (sharing the encoder and the embedding
    cache) with the default method for `queries` (`method_for`)."""
    if self.config.method is not None:
      return self
    return self.replace(method=self.method_for(queries))

  @property
  def late_chunking(self) -> bool:
    """Whether documents are embedded whole and candidates pooled from their tokens."""
    return self.config.late_chunking or self.config.unit == "word"

  @property
  def tokenizer(self) -> TokenCounter:
    """What counts tokens (budgets, `max_tokens`, `Passage.tokens`): the `tokenizer` given to
    the Pipeline, else the generator's, else the encoder's tokenizer."""
    if self.reader is not None:
      return self.reader
    if self.generator is not None:
      return generator_counter(self.generator)
    return token_counter(self.encoder.tokenizer)

  def _check_late_chunking(self) -> None:
    if self.late_chunking:
      check_late_chunking(self.encoder, self.config, self.embedder.prompt_name("passage"))

  def replace(self, **changes) -> "Pipeline":
    """A copy with some settings changed (e.g. `method=`), sharing the encoder, the index
    and the embedding cache, so comparing methods embeds the texts once. `encoder=`,
    `index=`, `agent=`, `generator=` and `tokenizer=` replace those."""
    new = copy.copy(self)
    if "tokenizer" in changes:
      tokenizer = changes.pop("tokenizer")
      new.reader = None if tokenizer is None else token_counter(tokenizer)
    for name in ("encoder", "index", "agent", "generator"):
      if name in changes:
        setattr(new, name, changes.pop(name))
    new.config = self.config.replace(**changes)
    if new.encoder is not self.encoder:  # embeddings of another model are not reusable
      new._cache = EmbeddingCache()
    new._check_late_chunking()
    return new

  # -- embedding and candidates ----------------------------------------------------------------
  @property
  def embedder(self) -> Embedder:
    """The encoder with its prompt per role and this pipeline's embedding cache (`embed`)."""
    cfg = self.config
    return Embedder(self.encoder, self._cache, batch_size=cfg.batch_size, progress=cfg.progress,
                    cache_size=cfg.cache_size)

  def embed(self, texts: Sequence[str], role: str = "passage") -> np.ndarray:
    """Normalised embeddings `[N, D]` of `texts` with the encoder's prompt for `role`
    (``"query"``, ``"passage"`` or ``"symmetric"``); equal to
    `encoder.encode(texts, prompt_name=role)` where the encoder has that prompt."""
    return self.embedder.embed(texts, role)

  def split(self, documents, *, sources=None, budget=None, granularity: str = "passage") -> list:
    """Splits documents into candidate `Passage`s with this pipeline's unit and tokenizer.

    With a `budget` (tokens of the context as sent), passages are cut short enough that each
    fits it on its own as sent (`max_tokens` lowered to what the budget leaves after the
    passage's number and separator), so a budget below the configured `max_tokens` still
    selects; only a budget below one token of text plus that numbering is refused. Where
    `granularity` is (or ``"auto"`` resolves to) ``"sentence"``, the candidates are the
    passages' sentences, as `select` embeds them."""
    cfg = self.config
    granularity_lib.check_granularity(granularity, unit=cfg.unit)
    passages = reader_lib.split_to_fit(documents, self.tokenizer, unit=cfg.unit,
                                       max_tokens=cfg.max_tokens, sources=sources, budget=budget)
    if granularity_lib.resolve(granularity, budget=budget, costs=[p.tokens for p in passages],
                               unit=cfg.unit) == "sentence":
      passages = granularity_lib.sentences(passages, self.tokenizer)[0]
    return passages

  def build_index(self, documents, *, sources=None, index: Optional[VectorIndex] = None,
                  info: Optional[dict] = None) -> VectorIndex:
    """Splits and embeds `documents` into `index` (a new `VectorIndex` by default). Each
    vector's metadata is its `Passage` (doc, source, span, tokens, title)."""
    return cands_lib.build_index(self, documents, sources=sources, index=index, info=info)

  # -- selection -------------------------------------------------------------------------------
  def select(self, queries=None, documents_or_index=None, *, budget=None, k: Optional[int] = None,
             min_gain: Optional[float] = None, embeddings=None,
             query_embeddings=None, sources=None, pinned=None, groups=None,
             max_per_group: Optional[int] = None,
             granularity: str = DEFAULT_GRANULARITY) -> SelectionResult:
    """Picks passages for `queries` from `documents_or_index`, in order, within `budget`.

    Args:
      queries: a query string, a list of them (a multi-query objective: the context serves
        them all), or None for text selection (method ``"coverage"``).
      documents_or_index: documents (list of str), candidate `Passage`s, or a `VectorIndex`
        (candidates retrieved by the queries). Default: the pipeline's `index`.
      budget: most tokens of the context as sent (`SelectionResult.context()`: the passages
        with their numbers and blank lines) in the reader's tokens (see `tokenizer`); None: no
        budget, `k` picks. `Passage`s given as they are, and candidates given with
        `embeddings`, cost their own `tokens` instead (the budget is their sum).
      k: most picks (default: as many as fit).
      min_gain: stop when the next pick's marginal gain falls below this; default the
        pipeline's `min_gain`. Not applied to ``"corag"``, whose order is searched as a whole.
      embeddings: `[N, D]` embeddings the caller already has for `documents_or_index` (a list
        of `Passage`s, or strings taken as one passage each): nothing is embedded again
        (what the framework adapters pass). They serve relevance and similarity alike.
      query_embeddings: `[Q, D]` embeddings of `queries`, likewise.
      sources: names of the documents (e.g. file names), recorded on their passages.
      pinned: indices into `documents_or_index` that are picked first, in that order, and
        count against `k` and the budget: for documents the Pipeline splits, document indices
        (every passage of each document, in reading order); for `Passage`s (or texts given
        with `embeddings`), candidate indices. Not for a `VectorIndex`.
      groups: one hashable label per item of `documents_or_index` (per document when the
        Pipeline splits them, else per passage), e.g. each passage's source; with
        `max_per_group`. Default: each passage's `doc` (its document).
      max_per_group: the most picks per group (pinned ones count). Every method honours the
        three (greedy and CORAG in the core, NaiveRAG and MMR in their fill).
      granularity: ``"auto"`` (the default): ``"sentence"`` when the budget cannot hold every
        passage whole, else ``"passage"`` (also without a budget, with `embeddings`, with
        sentences or words as candidates); the result's `granularity` says which.
        ``"passage"``: each candidate is sent whole. ``"sentence"``: the candidates are the
        passages' sentences, and each passage is sent whole or as runs of its picked
        sentences (with its title where a run does not hold it), all within the one budget;
        `k`, `pinned` and `max_per_group` still count passages (the sentences' passages:
        parts of at most `k` of them are sent). See docs/pipeline.md.
    """
    granularity_lib.check_granularity(granularity, unit=self.config.unit,
                                      embeddings=embeddings is not None)
    queries = cands_lib.as_queries(queries)
    request = Request(queries, documents_or_index, budget, k, granularity, pinned, groups,
                      max_per_group, embeddings, query_embeddings, sources)
    return self._select([request], min_gain)[0]

  def select_many(self, requests: Sequence, *, budget=None, k: Optional[int] = None,
                  min_gain: Optional[float] = None, pinned: Optional[Sequence] = None,
                  groups: Optional[Sequence] = None, max_per_group: Optional[int] = None,
                  embeddings: Optional[Sequence] = None,
                  query_embeddings: Optional[Sequence] = None,
                  granularity: str = DEFAULT_GRANULARITY) -> list:
    """Runs independent requests `[(queries, documents), ...]` in one batched call.

    Each request is embedded as `select` embeds it (texts seen before come from the embedding
    cache); the requests are padded (with a `valid` mask) and selected by `jax.vmap`-ed solves
    of `solve_rows` rows (`PipelineConfig`), per shape bucket and search choice, for every
    method. `select` runs the same program, so results equal `select` on each request, bit for
    bit.

    `pinned`, `groups`, `embeddings` and `query_embeddings` hold one entry per request (each
    as `select` takes it, or None); `max_per_group` applies to every request. A request with
    `embeddings` (`[N, D]`, one row per item of its documents, taken as passages) and
    `query_embeddings` (`[Q, D]`) is embedded by nobody; its solve is batched with the others.
    `granularity` applies to every request, as in `select`.
    """
    per = request_lib.per_request(requests, pinned=pinned, groups=groups, embeddings=embeddings,
                       query_embeddings=query_embeddings)
    granularity_lib.check_granularity(granularity, unit=self.config.unit,
                                      embeddings=any(e is not None for e in per["embeddings"]))
    requests = per.pop("requests")
    values = [Request(cands_lib.as_queries(q), docs, budget, k, granularity, where=r,
                      max_per_group=max_per_group, **{n: v[r] for n, v in per.items()})
              for r, (q, docs) in enumerate(requests)]
    return self._select(values, min_gain)

  def pick(self, queries, documents, *, budget=None, k: Optional[int] = None,
           min_gain: Optional[float] = None, granularity: str = DEFAULT_GRANULARITY, pinned=None,
           groups=None, max_per_group: Optional[int] = None, embeddings=None,
           query_embeddings=None, costs=None, keep=None) -> SelectionResult:
    """Selects among an application's `documents` as they are: what `jaxsel serve` and the
    framework adapters call. Each document (a str, or a record with a ``"text"`` and an optional
    ``"title"``) is one candidate costing `costs[i]` tokens (default: its text in `tokenizer`);
    a blank one is never picked (`keep`: `[N]` bools, which may be). `pinned`, `groups`,
    `costs`, `keep` and `embeddings` hold one entry per document; the rest is as in `select`.
    The result's `picks` name the documents: `Pick(document, start, end, text, tokens,
    relevance, gain)`, a part of a document at granularity ``"sentence"``."""
    granularity_lib.check_granularity(granularity, unit=self.config.unit,
                                      embeddings=embeddings is not None)
    value = front.request(self.tokenizer, cands_lib.as_queries(queries), documents,
                          budget=budget, k=k, granularity=granularity, pinned=pinned,
                          groups=groups, max_per_group=max_per_group, embeddings=embeddings,
                          query_embeddings=query_embeddings, costs=costs, keep=keep)
    return self._select([value], min_gain)[0]

  check_pick = staticmethod(front.check_settings)
  resolve_granularity = staticmethod(granularity_lib.resolve)

  def pick_many(self, requests: Sequence, *, budget=None, k: Optional[int] = None,
                min_gain: Optional[float] = None, granularity: str = DEFAULT_GRANULARITY,
                pinned=None, groups=None, max_per_group: Optional[int] = None, embeddings=None,
                query_embeddings=None, costs=None, keep=None) -> list:
    """`pick` of many `(queries, documents)` requests in one batched call, as `select_many`:
    `pinned`, `groups`, `embeddings`, `query_embeddings`, `costs` and `keep` hold one entry
    per request, each as `pick` takes it (or None)."""
    per = request_lib.per_request(requests, pinned=pinned, groups=groups, embeddings=embeddings,
                       query_embeddings=query_embeddings, costs=costs, keep=keep)
    granularity_lib.check_granularity(granularity, unit=self.config.unit,
                                      embeddings=any(e is not None for e in per["embeddings"]))
    requests = per.pop("requests")
    values = [front.request(self.tokenizer, cands_lib.as_queries(q), docs, where=r,
                            budget=budget, k=k, granularity=granularity,
                            max_per_group=max_per_group, **{n: v[r] for n, v in per.items()})
              for r, (q, docs) in enumerate(requests)]
    return self._select(values, min_gain)

  def _select(self, requests: Sequence[Request], min_gain) -> list:
    """The `SelectionResult` of each request; the default method is chosen per request."""
    by_method = collections.defaultdict(list)
    for r, value in enumerate(requests):
      by_method[self.method_for(value.queries)].append(r)
    results = [None] * len(requests)
    for method, rows in by_method.items():
      pipe = self if method == self.config.method else self.replace(method=method)
      for r, out in zip(rows, pipe._run([requests[r] for r in rows], min_gain)):
        results[r] = out
    return results

  def _run(self, requests: Sequence[Request], min_gain) -> list:
    """The `SelectionResult` of each request, by this pipeline's method: checked, embedded,
    solved together (`request.prepare`, `batch.solve`)."""
    min_gain = self.config.min_gain if min_gain is None else min_gain
    prepared = request_lib.prepare(self, list(requests))
    outs = batch_lib.solve(self.config, prepared, min_gain=min_gain)
    guides = guide_lib.solve(self.config, guide_lib.requests(self, prepared))
    return [batch_lib.result(self.config, self.tokenizer, r, out, min_gain=min_gain, guide=g)
            for r, out, g in zip(prepared, outs, guides)]

  # -- answering -------------------------------------------------------------------------------
  def answer(self, query: str, documents_or_index=None, *, budget=None, template=None,
             max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, order: str = "document",
             context_window: Optional[int] = None, **select_kwargs) -> Answer:
    """Selects the context for `query` (as `select` does) and asks the generator.

    Token counts are the generator's own (its `counter`: a `TransformersGenerator`'s tokenizer,
    the tokenizer given to an `OpenAIGenerator`) unless the Pipeline was given a `tokenizer`.

    Args:
      query: the question (one string).
      documents_or_index, **select_kwargs: as in `select`.
      budget: most tokens of the context as sent (default 256, or what the window leaves).
      template: the prompt, with `{context}` and `{query}` (default `SelectionResult.prompt`'s).
      max_new_tokens: the longest answer, in the generator's tokens.
      order: the context's order in the prompt: ``"document"`` (reading order, the default),
        ``"selection"`` (most valuable first), ``"relevance"`` or ``"edges"`` (the most relevant
        at both ends; `SelectionResult.ordered`).
      context_window: the model's window `N` in its tokens. The context gets what remains of it
        after the template, the question, the chat template's own tokens and `max_new_tokens`
        (and at most `budget`); the prompt as the generator reads it is then counted and, where
        a join merges differently, the last picks are dropped until it is at most
        `N - max_new_tokens`. A ValueError when the question and template alone do not fit.

    Returns:
      `Answer(text, selection, prompt, generator, timings)`.
    """
    return reader_lib.answer(self, query, documents_or_index, budget=budget, template=template,
                             max_new_tokens=max_new_tokens, order=order,
                             context_window=context_window, select_kwargs=select_kwargs)

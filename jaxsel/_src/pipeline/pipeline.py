"""From documents and queries to an ordered, budgeted context: split, embed, select, lay out.

Shape legend: B requests, Q queries, N candidate passages, K picks, D embedding dimension.

`Pipeline.select` is a thin, inspectable composition of library functions:

1. candidates: `jaxsel.split_documents` cuts the documents into sentences or passages with
   spans and token costs, or a `VectorIndex` retrieves them for the queries;
2. the encoder embeds queries and passages (`Encoder.encode` with the model's prompt names:
   asymmetric query/passage prompts for relevance, a symmetric one for similarity);
3. one compiled function (`pipeline.solve`) scores them by the registry's rule, builds the
   method's objective or scorer by name (`jaxsel._src.methods`) and runs greedy, the CORAG
   search or a baseline within the token budget;
4. `SelectionResult` holds the picks with their scores, gains, cost and saturation curve.

`select_many` runs many independent requests in one call: one encoder pass over all texts
and, for the submodular methods, one `jax.vmap`-ed solve over the padded requests.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
import time
from typing import Optional, Sequence

import jax
import numpy as np

from jaxsel._src import checks, methods
from jaxsel._src import text as text_lib
from jaxsel._src.agent.features import query_input
from jaxsel._src.agent.model import ConfigAgent
from jaxsel._src.index import VectorIndex
from jaxsel._src.numerics import ELEMENTWISE_NONNEG
from jaxsel._src.pipeline import solve as solve_lib
from jaxsel._src.pipeline.config import PipelineConfig
from jaxsel._src.generation import DEFAULT_MAX_NEW_TOKENS, Generator, default_generator
from jaxsel._src.pipeline.result import Answer, SelectionResult
from jaxsel._src.types import Encoder


def available_methods() -> tuple:
  """The selection methods, by name (`Pipeline(method=...)`)."""
  return methods.METHODS


def available_scorers() -> tuple:
  """The CORAG scorers of the registry, by name (`Pipeline(corag_scorer=...)`)."""
  return tuple(methods.SCORERS)


def _as_queries(queries) -> list:
  if queries is None:
    return []
  if isinstance(queries, str):
    queries = [queries]
  if not isinstance(queries, (list, tuple)):
    raise TypeError(f"`queries` must be a str, a list of str, or None (text selection), got "
                    f"{type(queries).__name__}.")
  queries = list(queries)
  for i, q in enumerate(queries):
    if not isinstance(q, str):
      raise TypeError(f"`queries[{i}]` must be a str, got {type(q).__name__}.")
    if not q.strip():
      raise ValueError(f"`queries[{i}]` is empty; drop it or pass None for text selection.")
    checks.check_unicode(q, f"queries[{i}]")
  return queries


class Pipeline:
  """Selects the passages that belong in an LLM's context window, in order, within a budget.

  Example:
    >>> enc = jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")
    >>> pipe = jaxsel.Pipeline(enc, method="facility_location")
    >>> res = pipe.select("Who wrote it?", [document], budget=256)
    >>> print(res.table()); llm(res.prompt())

  Args:
    encoder: a `jaxsel.Encoder` (`jaxsel.load_encoder` returns one): `encode(texts, *,
      prompt_name, normalize, batch_size, progress) -> [N, D]`, its `prompts` and the
      Hugging Face `tokenizer` that token costs come from.
    index: a default `VectorIndex` to select from when `select` gets no documents.
    method: one of `available_methods()` (see `PipelineConfig`).
    agent: a trained `jaxsel.ConfigAgent`: it predicts the CORAG scorer and search settings
      per request from the query embedding (the mean over the queries).
    generator: what `answer` asks (`jaxsel.load_generator(...)`, or an `OpenAIGenerator`);
      default: the offline SmolLM2-135M-Instruct, loaded at the first `answer`.
    config: a `PipelineConfig`; keyword `settings` (the same names) override its fields.
  """

  def __init__(self, encoder: Encoder, index: Optional[VectorIndex] = None,
               method: Optional[str] = None, *, agent: Optional[ConfigAgent] = None,
               generator: Optional[Generator] = None, config: Optional[PipelineConfig] = None,
               **settings):
    if encoder is None or not callable(getattr(encoder, "encode", None)):
      raise TypeError("`encoder` must have an `encode(texts, ...)` method, e.g. "
                      "`jaxsel.load_encoder(name_or_path)`.")
    if index is not None and not isinstance(index, VectorIndex):
      raise TypeError(f"`index` must be a jaxsel VectorIndex or None, got {type(index).__name__}.")
    if agent is not None and not isinstance(agent, ConfigAgent):
      raise TypeError(f"`agent` must be a jaxsel ConfigAgent (`jaxsel.load_agent`), got "
                      f"{type(agent).__name__}.")
    if generator is not None and not isinstance(generator, Generator):
      raise TypeError(f"`generator` must have `generate(prompts, *, max_new_tokens)` and `name` "
                      f"(`jaxsel.load_generator`), got {type(generator).__name__}.")
    if method is not None:
      settings["method"] = method
    self.encoder = encoder
    self.index = index
    self.agent = agent
    self.generator = generator
    self.config = (config or PipelineConfig()).replace(**settings)
    self._check_late_chunking()
    self._cache = collections.OrderedDict()  # (prompt prefix, texts) -> embeddings

  @property
  def late_chunking(self) -> bool:
    """Whether documents are embedded whole and candidates pooled from their tokens."""
    return self.config.late_chunking or self.config.unit == "word"

  def _check_late_chunking(self) -> None:
    if self.late_chunking and not callable(getattr(self.encoder, "encode_chunks", None)):
      raise TypeError("late chunking (`late_chunking=True` or `unit='word'`) needs an encoder with "
                      "`encode_chunks(text, spans, ...)`, e.g. `jaxsel.load_encoder(...)`.")

  def __getattr__(self, name):  # settings read as attributes: pipe.method, pipe.budget...
    config = self.__dict__.get("config")
    if config is not None and name in PipelineConfig.__dataclass_fields__:
      return getattr(config, name)
    raise AttributeError(f"'Pipeline' object has no attribute {name!r}")

  def replace(self, **changes) -> "Pipeline":
    """A copy with some settings changed (e.g. `method=`), sharing the encoder, the index
    and the embedding cache, so comparing methods embeds the texts once. `encoder=`,
    `index=`, `agent=` and `generator=` replace those."""
    new = copy.copy(self)
    for name in ("encoder", "index", "agent", "generator"):
      if name in changes:
        setattr(new, name, changes.pop(name))
    new.config = self.config.replace(**changes)
    if new.encoder is not self.encoder:  # embeddings of another model are not reusable
      new._cache = collections.OrderedDict()
    new._check_late_chunking()
    return new

  # -- embedding -------------------------------------------------------------------------------
  @property
  def tokenizer(self):
    return self.encoder.tokenizer

  def _prompt_name(self, role: str) -> Optional[str]:
    """The encoder's prompt name for `role` when it defines one, else None (no prompt)."""
    return role if role in self.encoder.prompts else None

  def embed(self, texts: Sequence[str], role: str = "passage") -> np.ndarray:
    """Normalised embeddings `[N, D]` of `texts` with the encoder's prompt for `role`
    (``"query"``, ``"passage"`` or ``"symmetric"``); equal to
    `encoder.encode(texts, prompt_name=role)` where the encoder has that prompt."""
    texts = list(texts)
    if not texts:
      raise ValueError("Nothing to embed: the input has no text.")
    name = self._prompt_name(role)
    key = (self.encoder.prompts[name] if name else None, tuple(texts))
    if key in self._cache:
      self._cache.move_to_end(key)
      return self._cache[key]
    out = np.asarray(self.encoder.encode(texts, prompt_name=name, normalize=True,
                                         batch_size=self.config.batch_size,
                                         progress=self.config.progress), np.float32)
    if self.config.cache_size:
      out.flags.writeable = False  # shared by later calls: nobody may change it in place
      self._cache[key] = out
      while len(self._cache) > self.config.cache_size:
        self._cache.popitem(last=False)
    return out

  def _passage_embeddings(self, texts):
    """(asymmetric passage embeddings for relevance, symmetric ones for similarity).

    Symmetric encoding uses the encoder's ``"symmetric"`` prompt if it has one, else no
    prompt; when that equals the passage prompt (e.g. all-MiniLM-L6-v2, which has none) the
    passages are embedded once.
    """
    e = self.embed(texts, "passage")
    prompts = self.encoder.prompts
    if prompts.get("symmetric", "") == prompts.get("passage", ""):
      return e, e
    return e, self.embed(texts, "symmetric")

  def _late_chunks(self, documents, passages) -> np.ndarray:
    """`[N, D]`: each passage pooled from its document's token states (the passage prompt)."""
    name = self._prompt_name("passage")
    spans = tuple((p.doc, p.start, p.end) for p in passages)
    key = ("late chunks", self.encoder.prompts[name] if name else None, tuple(documents), spans)
    if key in self._cache:
      self._cache.move_to_end(key)
      return self._cache[key]
    out = np.zeros((len(passages), self.encoder.dim), np.float32)
    by_doc = collections.defaultdict(list)
    for i, p in enumerate(passages):
      by_doc[p.doc].append(i)
    for d, rows in by_doc.items():
      out[rows] = np.asarray(self.encoder.encode_chunks(
          documents[d], [(passages[i].start, passages[i].end) for i in rows], prompt_name=name))
    if self.config.cache_size:
      out.flags.writeable = False
      self._cache[key] = out
      while len(self._cache) > self.config.cache_size:
        self._cache.popitem(last=False)
    return out

  def split(self, documents, *, sources=None) -> list:
    """Splits documents into candidate `Passage`s with this pipeline's unit and tokenizer."""
    return text_lib.split_documents(documents, unit=self.config.unit,
                                    max_tokens=self.config.max_tokens, tokenizer=self.tokenizer,
                                    sources=sources)

  def build_index(self, documents, *, sources=None, index: Optional[VectorIndex] = None,
                  info: Optional[dict] = None) -> VectorIndex:
    """Splits and embeds `documents` into `index` (a new `VectorIndex` by default). Each
    vector's metadata is its `Passage` (doc, source, span, tokens, title)."""
    passages = self.split(documents, sources=sources)
    if not passages:
      raise ValueError("`documents` contain no text to index.")
    if self.late_chunking:
      emb = self._late_chunks(checks.check_texts(documents, "documents"), passages)
    else:
      emb = self.embed([p.text for p in passages], "passage")
    if index is None:
      index = VectorIndex(emb.shape[1], info={"unit": self.config.unit,
                                              "max_tokens": self.config.max_tokens, **(info or {})})
    meta = [{k: v for k, v in p.to_dict().items() if k != "text"} for p in passages]
    index.add(emb, texts=[p.text for p in passages], metadata=meta)
    return index

  # -- candidates ------------------------------------------------------------------------------
  def _candidates(self, queries, source, embeddings=None):
    """-> (passages, passage embeddings, symmetric embeddings, documents or None)."""
    if embeddings is not None:
      return self._given(source, embeddings)
    if source is None:
      source = self.index
    if source is None:
      raise ValueError("No documents: pass `documents_or_index` (documents, passages or a "
                       "VectorIndex) or build the Pipeline with `index=`.")
    if isinstance(source, VectorIndex):
      return self._from_index(queries, source) + (None,)
    if isinstance(source, str):
      raise TypeError("`documents_or_index` must be a list of documents, not one string; "
                      "wrap it: [document].")
    source = list(source)
    if not source:
      raise ValueError("`documents_or_index` is empty: give at least one document.")
    if all(isinstance(p, text_lib.Passage) for p in source):
      passages, docs = source, None
    else:
      passages, docs = self.split(source), source
    if not passages:
      raise ValueError("The documents contain no text (only whitespace).")
    if self.late_chunking and docs is not None:
      e = self._late_chunks(docs, passages)
      return passages, e, e, docs
    e, s = self._passage_embeddings([p.text for p in passages])
    return passages, e, s, docs

  def _given(self, source, embeddings):
    """Candidates the caller has already embedded (a framework's nodes): `Passage`s or texts
    (one passage each, costed with this pipeline's tokenizer) and their `[N, D]` embeddings,
    used for relevance and similarity alike."""
    if isinstance(source, (str, VectorIndex)) or source is None:
      raise TypeError("`embeddings` go with a list of passages (`Passage`s or strings), one row each.")
    source = list(source)
    if not source:
      raise ValueError("`documents_or_index` is empty: give at least one passage.")
    if all(isinstance(p, text_lib.Passage) for p in source):
      passages = source
    else:
      texts = checks.check_texts(source, "documents_or_index")
      costs = text_lib.token_costs(texts, self.tokenizer)
      passages = [text_lib.Passage(t, 0, len(t), doc=i, tokens=int(c))
                  for i, (t, c) in enumerate(zip(texts, costs))]
    e = checks.as_host_float32(embeddings, "embeddings")
    if e.ndim != 2 or e.shape[0] != len(passages):
      raise ValueError(f"`embeddings` must be [N, D] with one row per passage (N = {len(passages)}), "
                       f"got shape {tuple(e.shape)}.")
    return passages, e, e, None

  def _from_index(self, queries, index: VectorIndex):
    if not len(index):
      raise ValueError("The index is empty; add passages first (`Pipeline.build_index`).")
    candidates = self.config.candidates
    if queries:
      hits = index.search(self.embed(queries, "query"), k=min(candidates, len(index)))
      ids = list(dict.fromkeys(int(i) for i in np.asarray(hits.indices).T.reshape(-1) if i >= 0))
    elif len(index) <= max(candidates, 1024):
      ids = list(range(len(index)))
    else:
      raise ValueError(f"Text selection over a whole index of {len(index)} passages needs "
                       "queries to retrieve candidates; pass queries or documents.")
    passages = []
    for i in ids:
      meta = index.metadata[i] if isinstance(index.metadata[i], dict) else {}
      t = index.texts[i] if index.texts[i] is not None else ""
      fields = {k: meta[k] for k in ("start", "end", "doc", "tokens", "source", "title") if k in meta}
      fields.setdefault("start", 0)
      fields.setdefault("end", len(t))
      passages.append(text_lib.Passage(text=t, **fields))
    missing = [j for j, p in enumerate(passages) if not p.tokens and p.text]
    if missing:
      costs = text_lib.token_costs([passages[j].text for j in missing], self.tokenizer)
      for j, c in zip(missing, costs):
        passages[j] = dataclasses.replace(passages[j], tokens=int(c))
    e = np.asarray(index.embeddings)[np.asarray(ids)]
    return passages, e, e

  # -- selection -------------------------------------------------------------------------------
  def _check_queries(self, queries) -> None:
    method = self.config.method
    if method in methods.NEEDS_QUERY and not queries:
      raise ValueError(f"method {method!r} ranks passages for a query; pass `queries`, or "
                       "use method='coverage' for text selection without a query.")
    if method == "coverage" and queries:
      raise ValueError("method 'coverage' is text selection: it covers the documents and takes no "
                       "query (it would be ignored). Pass `queries=None`, or use "
                       "method='facility_location' or 'saturated_coverage' to select for the queries.")

  def _check(self, budget, k, costs, n) -> None:
    if budget is not None:
      if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer, np.floating)) \
          or not math.isfinite(budget) or budget < 0:
        raise ValueError(f"`budget` must be a finite number of tokens >= 0, got {budget!r}.")
      cheapest = int(np.min(costs)) if len(costs) else 0
      if budget < cheapest:
        raise ValueError(f"`budget` {budget:g} is below the smallest passage ({cheapest} tokens); "
                         "raise the budget or split into smaller passages (`max_tokens`).")
    if k is not None:
      if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"`k` must be a positive int or None, got {k!r}.")

  def _query_embeddings(self, queries, given, dim: int) -> Optional[np.ndarray]:
    if given is None:
      return self.embed(queries, "query") if queries else None
    q = checks.as_host_float32(given, "query_embeddings")
    if q.ndim == 1:
      q = q[None]
    if q.shape != (len(queries), dim):
      raise ValueError(f"`query_embeddings` must be [Q, D] = [{len(queries)}, {dim}] (one row per "
                       f"query, the passages' dimension), got shape {tuple(q.shape)}.")
    return q

  def _search_choice(self, q_emb):
    """(scorer name or builder, iterations, exploration, cost_penalty) for this request."""
    cfg = self.config
    if self.agent is None:
      return cfg.corag_scorer, cfg.iterations, cfg.exploration, cfg.cost_penalty
    choice = self.agent.predict(query_input(q_emb))
    return choice.scorer, choice.iterations, choice.exploration, choice.cost_penalty

  def _text_signals(self, scorer, queries, passages):
    if self.config.method != "corag" or not (callable(scorer) or scorer in methods.USES_TEXT_SIGNALS):
      return None
    return methods.text_signals([p.text for p in passages], [p.doc for p in passages],
                                [p.title for p in passages], queries)

  def _solve(self, q_emb, emb, sym, costs, signals, *, budget, k, min_gain, scorer,
             iterations, exploration, cost_penalty, n_pad=None, q_pad=None):
    """Pads one request to its buckets and runs the compiled solve; -> `solve.Output` (NumPy)."""
    n_pad = n_pad or solve_lib.bucket(len(costs))
    q_pad = q_pad or solve_lib.query_bucket(0 if q_emb is None else len(q_emb))
    inputs = solve_lib.pad_inputs(q_emb, emb, sym, costs, signals, n=n_pad, q=q_pad)
    # k is static: bucketed too (the picks are cut to the request's own k afterwards).
    k = n_pad if k is None else min(int(k), n_pad)
    return self._run(inputs, budget=budget, k=k, min_gain=min_gain, scorer=scorer,
                     iterations=iterations, exploration=exploration, cost_penalty=cost_penalty,
                     n=n_pad, batched=False)

  def _run(self, inputs, *, budget, k, min_gain, scorer, iterations, exploration, cost_penalty,
           n, batched):
    cfg = self.config
    settings = solve_lib.Settings(*(np.float32(x) for x in (
        0.0 if budget is None else budget, 0.0 if min_gain is None else min_gain, cfg.discount,
        exploration, cost_penalty, cfg.diversity)))
    depth = min(k, cfg.max_depth or n)
    dense = (cfg.method not in methods.SUBMODULAR or n <= cfg.dense_limit
             or cfg.nonneg not in ELEMENTWISE_NONNEG)
    static = dict(method=cfg.method, k=k, depth=depth, greedy_method=cfg.greedy_method,
                  scorer=scorer, iterations=int(iterations), nonneg=cfg.nonneg, dense=dense,
                  backend=cfg.backend, use_budget=budget is not None,
                  use_min_gain=min_gain is not None and cfg.method in methods.SUBMODULAR,
                  top_up=cfg.method == "corag" and cfg.top_up)
    fn = lambda x: solve_lib.solve(x, settings, **static)
    out = jax.vmap(fn)(inputs) if batched else fn(inputs)
    return jax.tree.map(np.asarray, out)

  def _result(self, queries, passages, out, *, q, n, budget, k, min_gain, docs):
    count = min(int(out.count), n if k is None else min(int(k), n))
    order = np.asarray(out.order[:count], np.int64)
    gains, curve = np.asarray(out.gains[:count]), np.asarray(out.curve[:count])
    # A searched order is not a greedy ranking (a later chunk may pay off only after an
    # earlier one), so `min_gain` cuts only the greedy baselines after the fact.
    if min_gain is not None and self.config.method in methods.BASELINES:
      low = np.nonzero(gains < min_gain)[0]
      if len(low):
        order, gains, curve = order[:low[0]], gains[:low[0]], curve[:low[0]]
    rel = out.relevance[:q, :n] if queries else None
    picked = [passages[i] for i in order]
    return SelectionResult(
        method=self.config.method, queries=queries, passages=picked, indices=order,
        scores=None if rel is None else rel.max(axis=0)[order],
        gains=gains.astype(np.float32), curve=curve.astype(np.float32),
        cost=int(sum(p.tokens for p in picked)),
        budget=None if budget is None else float(budget), candidates=passages,
        candidate_scores=rel, documents=docs, unit=self.config.unit)

  def select(self, queries=None, documents_or_index=None, *, budget=None, k: Optional[int] = None,
             min_gain: Optional[float] = None, embeddings=None,
             query_embeddings=None) -> SelectionResult:
    """Picks passages for `queries` from `documents_or_index`, in order, within `budget`.

    Args:
      queries: a query string, a list of them (a multi-query objective: the context serves
        them all), or None for text selection (method ``"coverage"``).
      documents_or_index: documents (list of str), candidate `Passage`s, or a `VectorIndex`
        (candidates retrieved by the queries). Default: the pipeline's `index`.
      budget: total tokens allowed (None: no budget, `k` picks).
      k: most picks (default: as many as fit).
      min_gain: stop when the next pick's marginal gain falls below this; default the
        pipeline's `min_gain`. Not applied to ``"corag"``, whose order is searched as a whole.
      embeddings: `[N, D]` embeddings the caller already has for `documents_or_index` (a list
        of `Passage`s, or strings taken as one passage each): nothing is embedded again
        (what the framework adapters pass). They serve relevance and similarity alike.
      query_embeddings: `[Q, D]` embeddings of `queries`, likewise.
    """
    queries = _as_queries(queries)
    min_gain = self.config.min_gain if min_gain is None else min_gain
    self._check_queries(queries)  # before any embedding
    passages, emb, sym, docs = self._candidates(queries, documents_or_index, embeddings)
    costs = np.asarray([p.tokens for p in passages], np.float32)
    self._check(budget, k, costs, len(passages))
    q_emb = self._query_embeddings(queries, query_embeddings, emb.shape[1])
    scorer, iterations, exploration, cost_penalty = self._search_choice(q_emb)
    signals = self._text_signals(scorer, queries, passages)
    out = self._solve(q_emb, emb, sym, costs, signals, budget=budget, k=k,
                      min_gain=min_gain, scorer=scorer, iterations=iterations,
                      exploration=exploration, cost_penalty=cost_penalty)
    if bool(out.nonfinite):
      raise ValueError(f"The CORAG scorer {scorer!r} returned NaN or infinite values for this "
                       "request; the search stopped. Check the scorer (and its model's inputs).")
    return self._result(queries, passages, out, q=len(queries), n=len(passages), budget=budget,
                        k=k, min_gain=min_gain, docs=docs)

  def select_many(self, requests: Sequence, *, budget=None, k: Optional[int] = None,
                  min_gain: Optional[float] = None) -> list:
    """Runs independent requests `[(queries, documents), ...]` in one batched call.

    All texts are embedded together; the candidate sets are padded to a common N (with a
    `valid` mask) and selected by one `jax.vmap`-ed solve for the submodular methods (other
    methods run request by request). Results equal `select` on each request.
    """
    requests = list(requests)
    min_gain = self.config.min_gain if min_gain is None else min_gain
    if not requests:
      raise ValueError("`requests` is empty; pass a list of (queries, documents) pairs.")
    if self.config.method not in methods.SUBMODULAR:
      return [self.select(q, d, budget=budget, k=k, min_gain=min_gain) for q, d in requests]
    qs, cands = [], []
    for r, req in enumerate(requests):
      if not isinstance(req, (tuple, list)) or len(req) != 2:
        raise TypeError(f"`requests[{r}]` must be a (queries, documents) pair.")
      q = _as_queries(req[0])
      self._check_queries(q)
      if isinstance(req[1], VectorIndex) or isinstance(req[1], str) or req[1] is None:
        raise TypeError(f"`requests[{r}]`: batched requests take documents or passages, not "
                        f"{type(req[1]).__name__}; use `select` for an index.")
      docs = list(req[1])
      if not docs:
        raise ValueError(f"`requests[{r}]` has no documents.")
      ps = docs if all(isinstance(p, text_lib.Passage) for p in docs) else self.split(docs)
      if not ps:
        raise ValueError(f"`requests[{r}]`: the documents contain no text.")
      self._check(budget, k, np.asarray([p.tokens for p in ps]), len(ps))
      qs.append(q)
      cands.append((ps, None if ps is docs else docs))
    # One encoder pass over every passage and every query of every request.
    emb, sym = self._passage_embeddings([p.text for ps, _ in cands for p in ps])
    all_q = [x for q in qs for x in q]
    q_emb = self.embed(all_q, "query") if all_q else None
    n_pad = solve_lib.bucket(max(len(ps) for ps, _ in cands))
    q_pad = solve_lib.query_bucket(max(len(q) for q in qs))
    kk = n_pad if k is None else min(int(k), n_pad)
    padded, po, qo = [], 0, 0
    for (ps, _), q in zip(cands, qs):
      n = len(ps)
      costs = np.asarray([p.tokens for p in ps], np.float32)
      qe = None if not q else q_emb[qo:qo + len(q)]
      padded.append(solve_lib.pad_inputs(qe, emb[po:po + n], sym[po:po + n], costs, None,
                                         n=n_pad, q=q_pad))
      po, qo = po + n, qo + len(q)
    inputs = jax.tree.map(lambda *xs: np.stack(xs), *padded)
    cfg = self.config
    out = self._run(inputs, budget=budget, k=kk, min_gain=min_gain, scorer=cfg.corag_scorer,
                    iterations=cfg.iterations, exploration=cfg.exploration,
                    cost_penalty=cfg.cost_penalty, n=n_pad, batched=True)
    results = []
    for r, ((ps, docs), q) in enumerate(zip(cands, qs)):
      one = jax.tree.map(lambda x: x[r], out)
      results.append(self._result(q, ps, one, q=len(q), n=len(ps), budget=budget, k=k,
                                  min_gain=min_gain, docs=docs))
    return results

  # -- answering -------------------------------------------------------------------------------
  def answer(self, query: str, documents_or_index=None, *, budget=256, template=None,
             max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, order: str = "document",
             **select_kwargs) -> Answer:
    """Selects the context for `query` (as `select` does) and asks the generator.

    Args:
      query: the question (one string).
      documents_or_index, budget, **select_kwargs: as in `select`.
      template: the prompt, with `{context}` and `{query}` (default `SelectionResult.prompt`'s).
      max_new_tokens: the longest answer, in the generator's tokens.
      order: the context's order in the prompt: ``"document"`` (reading order, the default) or
        ``"selection"`` (most valuable first).

    Returns:
      `Answer(text, selection, prompt, generator, timings)`.
    """
    if not isinstance(query, str):
      raise TypeError(f"`query` must be one question (a str), got {type(query).__name__}.")
    t0 = time.perf_counter()
    selection = self.select(query, documents_or_index, budget=budget, **select_kwargs)
    prompt = selection.prompt(template, order=order)
    t1 = time.perf_counter()
    if self.generator is None:
      self.generator = default_generator()
    text = self.generator.generate([prompt], max_new_tokens=max_new_tokens)[0]
    t2 = time.perf_counter()
    return Answer(text=text, selection=selection, prompt=prompt, generator=self.generator.name,
                  timings={"select": t1 - t0, "generate": t2 - t1})

"""From documents and queries to an ordered, budgeted context: `Pipeline.select`, `select_many`
and `answer`.

Shape legend: B requests, Q queries, N candidate passages, K picks, D embedding dimension.

`Pipeline.select` is a thin, inspectable composition of library functions:

1. candidates (`candidates`): `jaxsel.split_documents` cuts the documents into sentences or
   passages with spans and token costs, or a `VectorIndex` retrieves them for the queries;
2. the encoder embeds queries and passages (`embedding`: asymmetric query/passage prompts for
   relevance, a symmetric one for similarity, one cache);
3. one compiled function (`solve`) scores them by the registry's rule, builds the method's
   objective or scorer by name (`jaxsel._src.methods`) and runs greedy, the CORAG search or a
   baseline within the token budget;
4. `SelectionResult` holds the picks with their scores, gains, cost and saturation curve.

`select_many` runs many independent requests in one call: one encoder pass over all texts and
a `jax.vmap`-ed solve over the padded requests, for every method.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import time
from typing import NamedTuple, Optional, Sequence

import numpy as np

from jaxsel._src import checks, methods
from jaxsel._src import text as text_lib
from jaxsel._src.base import Configurator, Encoder, Generator
from jaxsel._src.generation import DEFAULT_MAX_NEW_TOKENS, default_generator, generator_counter
from jaxsel._src.index import VectorIndex
from jaxsel._src.methods import default_method
from jaxsel._src.numerics import ELEMENTWISE_NONNEG
from jaxsel._src.pipeline import candidates as cands_lib
from jaxsel._src.pipeline import granularity as granularity_lib
from jaxsel._src.pipeline import reader as reader_lib
from jaxsel._src.pipeline import solve as solve_lib
from jaxsel._src.pipeline import width as width_lib
from jaxsel._src.pipeline.config import PipelineConfig
from jaxsel._src.pipeline.embedding import Embedder, EmbeddingCache
from jaxsel._src.pipeline.result import DEFAULT_TEMPLATE, ORDERS, Answer, SelectionResult
from jaxsel._src.bridge import group_ids
from jaxsel._src.checks import check_texts
from jaxsel._src.constraints import UNCAPPED
from jaxsel._src.scorers.hops import load_hop_params
from jaxsel._src.search import raise_if_nonfinite
from jaxsel._src.tokens import TokenCounter, token_counter

DEFAULT_ANSWER_BUDGET = 256  # `answer`'s budget without a window


def available_methods() -> tuple:
  """The selection methods, by name (`Pipeline(method=...)`)."""
  return methods.METHODS


def available_scorers() -> tuple:
  """The CORAG scorers of the registry, by name (`Pipeline(corag_scorer=...)`)."""
  return tuple(methods.SCORERS)


class _Request(NamedTuple):
  """One request, checked and embedded, ready to pad and solve."""
  queries: list  # [Q] strings
  candidates: cands_lib.Candidates
  query_embeddings: Optional[np.ndarray]  # [Q, D]; None for text selection
  budget: float  # inf: no budget
  scorer: object  # the CORAG scorer (None for the other methods)
  iterations: int
  exploration: float
  cost_penalty: float
  signals: object  # `bridge.BridgeSignals` or None
  constraints: Optional[tuple] = None  # `candidates.constraints`: (pinned, cap_groups, cap)
  repeats: Optional[np.ndarray] = None  # CORAG: `candidates.repeats` [N], or None
  widening: float = 0.0  # CORAG's progressive widening (a wide request: `PipelineConfig.widening`)
  # CORAG over more than `search_width` candidates: the `[W']` it searches (`width.searched`;
  # `signals` are theirs), else None.
  searched: Optional[np.ndarray] = None


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
    if not self.late_chunking:
      return
    if not callable(getattr(self.encoder, "encode_chunks", None)):
      raise TypeError("late chunking (`late_chunking=True` or `unit='word'`) needs an encoder with "
                      "`encode_chunks(text, spans, ...)`, e.g. `jaxsel.load_encoder(...)`.")
    # Every passage must fit in one window of the encoder (words are never that long).
    max_tokens, capacity_of = self.config.max_tokens, getattr(self.encoder, "chunk_capacity", None)
    if max_tokens is None or self.config.unit == "word" or not callable(capacity_of):
      return
    capacity = capacity_of(prompt_name=self._embedder.prompt_name("passage"))
    if max_tokens > capacity:
      raise ValueError(
          f"`max_tokens` {max_tokens} is longer than late chunking can embed: the encoder reads "
          f"{capacity} text tokens per window (its {getattr(self.encoder, 'max_length', '?')} "
          "positions less special and prompt tokens), and a passage must fit in one window. Use "
          f"max_tokens <= {capacity}, or late_chunking=False.")

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
  def _embedder(self) -> Embedder:
    cfg = self.config
    return Embedder(self.encoder, self._cache, batch_size=cfg.batch_size, progress=cfg.progress,
                    cache_size=cfg.cache_size)

  def embed(self, texts: Sequence[str], role: str = "passage") -> np.ndarray:
    """Normalised embeddings `[N, D]` of `texts` with the encoder's prompt for `role`
    (``"query"``, ``"passage"`` or ``"symmetric"``); equal to
    `encoder.encode(texts, prompt_name=role)` where the encoder has that prompt."""
    return self._embedder.embed(texts, role)

  def split(self, documents, *, sources=None, budget=None) -> list:
    """Splits documents into candidate `Passage`s with this pipeline's unit and tokenizer.

    With a `budget` (tokens of the context as sent), passages are cut short enough that each
    fits it on its own as sent (`max_tokens` lowered to what the budget leaves after the
    passage's number and separator), so a budget below the configured `max_tokens` still
    selects; only a budget below one token of text plus that numbering is refused."""
    cfg = self.config
    max_tokens = text_lib.default_max_tokens(cfg.unit, cfg.max_tokens)
    budget = checks.token_budget(budget, none="no budget")
    if budget is None or cfg.unit == "word":
      return text_lib.split_documents(documents, unit=cfg.unit, max_tokens=max_tokens,
                                      tokenizer=self.tokenizer, sources=sources)
    counter = self.tokenizer
    # What a passage's number and separator cost as sent, at the widest number it may get.
    numbering = counter.count_one(reader_lib.piece(99_999, "x")) - counter.count_one("x")
    fit = int(budget) - max(numbering, 0)
    for _ in range(4):  # a tokenizer that merges across the numbering costs a little more
      if fit < 1:
        raise ValueError(f"`budget` {budget:g} leaves no room for a passage: each costs "
                         f"{numbering} tokens of numbering and separator as sent "
                         f"({reader_lib.piece(1, '')!r}); raise the budget.")
      limit = fit if max_tokens is None else min(max_tokens, fit)
      passages = text_lib.split_documents(documents, unit=cfg.unit, max_tokens=limit,
                                          tokenizer=counter, sources=sources)
      if not passages:
        return passages
      sent = reader_lib.candidate_costs(counter, [p.text for p in passages], unit=cfg.unit)
      over = int(sent.max()) - int(budget)
      if over <= 0 or limit < fit:  # fits, or the configured max_tokens decides
        return passages
      fit -= over
    return passages

  def build_index(self, documents, *, sources=None, index: Optional[VectorIndex] = None,
                  info: Optional[dict] = None) -> VectorIndex:
    """Splits and embeds `documents` into `index` (a new `VectorIndex` by default). Each
    vector's metadata is its `Passage` (doc, source, span, tokens, title)."""
    passages = self.split(documents, sources=sources)
    if not passages:
      raise ValueError("`documents` contain no text to index.")
    if self.late_chunking:
      emb = self._embedder.late_chunks(check_texts(documents, "documents"), passages)
    else:
      emb = self.embed([p.text for p in passages], "passage")
    if index is None:
      index = VectorIndex(emb.shape[1], info={"unit": self.config.unit,
                                              "max_tokens": self.config.max_tokens, **(info or {})})
    meta = [{k: v for k, v in p.to_dict().items() if k != "text"} for p in passages]
    index.add(emb, texts=[p.text for p in passages], metadata=meta)
    return index

  def _candidates(self, queries, source, embeddings=None, sources=None,
                  budget=None, granularity: str = "passage") -> cands_lib.Candidates:
    """The request's candidates; those the pipeline counts itself (split from documents
    or retrieved from an index) cost what they add to the context as sent, in the reader's
    tokens (`reader.candidate_costs`); `Passage`s the caller gives, and candidates
    given with `embeddings`, cost their own `tokens`. At `granularity="sentence"`, the
    sentences of those passages (`granularity.sentences`)."""
    expand = None
    if granularity == "sentence":
      expand = lambda ps: granularity_lib.sentences(ps, self.tokenizer)  # noqa: E731
    if embeddings is not None:  # a framework's nodes: each costs its own tokens
      return cands_lib.from_embeddings(source, embeddings, self.tokenizer)
    else:
      if source is None:
        source = self.index
      if source is None:
        raise ValueError("No documents: pass `documents_or_index` (documents, passages or a "
                         "VectorIndex) or build the Pipeline with `index=`.")
      if isinstance(source, VectorIndex):
        cands = cands_lib.from_index(source, queries, self._embedder, self.tokenizer,
                                     candidates=self.config.candidates)
        tokens = self.tokenizer.count([p.text for p in cands.passages])  # stored: another unit
        cands = cands._replace(passages=[dataclasses.replace(p, tokens=int(n))
                                         for p, n in zip(cands.passages, tokens)])
        if expand is not None:
          ps, parents, units = expand(cands.passages)
          cands = cands_lib.Candidates(ps, *self._embedder.passages([p.sent_text for p in ps]),
                                       None, None, parents, units)
        given = False
      else:
        cands = cands_lib.from_documents(source, self._embedder,
                                         lambda docs: self.split(docs, sources=sources,
                                                                 budget=budget),
                                         late_chunking=self.late_chunking, expand=expand)
        given = cands.documents is None
    return cands if given else self._sent(cands)

  def _sent(self, cands: cands_lib.Candidates) -> cands_lib.Candidates:
    return cands._replace(sent=reader_lib.candidate_costs(
        self.tokenizer, [p.sent_text for p in cands.passages], unit=self.config.unit))

  def _fitted(self, r: _Request, result: SelectionResult) -> SelectionResult:
    """`result` with its cost counted as sent (and trimmed to the budget: `reader.fit`) for
    the candidates the pipeline counted itself."""
    if r.candidates.sent is None:
      return result
    return reader_lib.fit(result, self.tokenizer, r.budget if np.isfinite(r.budget) else None)

  def _check_pinned(self, cons: Optional[tuple], name: str = "pinned") -> Optional[tuple]:
    """`cons`, when its pinned fit the orders a search or baseline builds (`max_depth`)."""
    depth = self.config.max_depth
    if cons is not None and depth is not None and self.config.method not in methods.SUBMODULAR \
        and len(cons[0]) > depth:
      raise ValueError(f"`{name}` holds {len(cons[0])} passages, more than `max_depth`={depth} "
                       f"of method {self.config.method!r} allows.")
    return cons

  def _request(self, queries, cands, q_emb, budget, cons: Optional[tuple]) -> _Request:
    """The request with its constraints (`cons`), search settings (the agent's, when there is
    one), text signals and, for CORAG, its repeated texts (`candidates.repeats`)."""
    cfg = self.config
    if cfg.method != "corag":
      return _Request(queries, cands, q_emb, budget, None, 1, cfg.exploration, cfg.cost_penalty,
                      None, cons)
    if self.agent is None:
      scorer, it, c, lam = cfg.corag_scorer, cfg.iterations, cfg.exploration, cfg.cost_penalty
    else:
      choice = self.agent.predict(np.mean(np.asarray(q_emb, np.float32), axis=0))
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
      signals = self._text_signals(queries, seen)
    wide = len(seen) > cfg.widen_above
    return _Request(queries, cands, q_emb, budget, scorer, int(it), c, lam, signals, cons,
                    repeats, cfg.widening if wide else 0.0, searched)

  def _text_signals(self, queries: list, passages: list):
    """`methods.text_signals` of a request (tens of milliseconds of Python for 20 passages),
    kept in the embedding cache beside the request's embeddings: a repeated request (`select`
    or `select_many`) reads them back."""
    texts, docs, titles = (tuple(p.text for p in passages), tuple(p.doc for p in passages),
                           tuple(p.title for p in passages))
    return self._cache.get(("text signals", tuple(queries), texts, docs, titles),
                           lambda: methods.text_signals(texts, docs, titles, queries),
                           size=self.config.cache_size)

  # -- the solve -------------------------------------------------------------------------------
  def _solve_config(self, r: _Request, *, n: int, k: Optional[int],
                    min_gain) -> solve_lib.SolveConfig:
    """The static settings of `r`'s solve over `n` (padded) candidates. Only greedy's `k` is
    static (its certificate is the bound for k picks); CORAG, NaiveRAG and MMR take theirs at
    run time (`Settings.limit`) under a depth of all `n`, so a new `k` compiles nothing."""
    cfg = self.config
    dense = (cfg.method not in methods.SUBMODULAR or n <= cfg.dense_limit
             or cfg.nonneg not in ELEMENTWISE_NONNEG)
    if cfg.method not in methods.SUBMODULAR:
      k = None
    k = n if k is None else min(int(k), n)
    return solve_lib.SolveConfig(
        method=cfg.method, k=k, depth=min(k, cfg.max_depth or n), greedy_method=cfg.greedy_method,
        scorer=r.scorer, iterations=r.iterations, nonneg=cfg.nonneg, dense=dense,
        backend=cfg.backend, knapsack=bool(np.isfinite(r.budget)),
        use_min_gain=min_gain is not None and cfg.method in methods.SUBMODULAR,
        # At sentence granularity CORAG's top-up runs after the solve (`granularity.fill`).
        top_up=cfg.method == "corag" and cfg.top_up and r.candidates.parents is None,
        constrained=r.constraints is not None, widen=r.widening > 0,
        width=None if r.searched is None else cfg.search_width)

  def _solve(self, requests: Sequence[_Request], *, k, min_gain) -> list:
    """`solve.Output` (NumPy) of each request. Each is padded to its own shape buckets, as one
    `select` pads it (padding to a larger size could reorder float sums and so break a near
    tie differently), and requests of the same buckets and search choice are solved together,
    `solve_rows` at a time, in one `jax.vmap`-ed program of `solve_rows` rows (a lone request
    padded by repeating it): `select` and every batch size run the same program, so a request
    gets the same floats however many requests share its call."""
    cfg = self.config
    # At sentence granularity `k` and the group caps count passages: the solve runs without
    # them (`granularity.within` keeps its picks while they hold; the pinned stay).
    sentence = requests[0].candidates.parents is not None
    k = None if sentence else k
    groups = collections.defaultdict(list)
    for i, r in enumerate(requests):
      groups[(solve_lib.bucket(len(r.candidates.passages)), solve_lib.query_bucket(len(r.queries)),
              r.scorer, r.iterations, bool(np.isfinite(r.budget)),
              r.constraints is not None, r.widening > 0, r.searched is not None)].append(i)
    outs = [None] * len(requests)
    for (n_pad, q_pad, *_), rows in groups.items():
      # The picks are cut to the request's own k afterwards.
      config = self._solve_config(requests[rows[0]], n=n_pad, k=k, min_gain=min_gain)
      for start in range(0, len(rows), cfg.solve_rows):
        part = rows[start:start + cfg.solve_rows]
        full = part + [part[-1]] * (cfg.solve_rows - len(part))
        inputs = solve_lib.pad_batch(
            [(requests[i].query_embeddings, requests[i].candidates.embeddings,
              requests[i].candidates.symmetric, requests[i].candidates.costs, requests[i].signals,
              _pinned_only(requests[i].constraints) if sentence else requests[i].constraints,
              requests[i].repeats, requests[i].searched) for i in full],
            n=n_pad, q=q_pad, w=config.width)
        settings = solve_lib.stack([solve_lib.Settings.of(
            budget=requests[i].budget, min_gain=min_gain, discount=cfg.discount,
            exploration=requests[i].exploration, cost_penalty=requests[i].cost_penalty,
            diversity=cfg.diversity, widening=requests[i].widening, limit=k) for i in full])
        out = solve_lib.run(inputs, settings, config)
        for b, i in enumerate(part):
          outs[i] = solve_lib.row(out, b)
    return outs

  def _result(self, r: _Request, out: solve_lib.Output, *, k, min_gain) -> SelectionResult:
    cfg, passages = self.config, r.candidates.passages
    raise_if_nonfinite(out.nonfinite, solve_lib.BASELINE_SCORERS.get(cfg.method, r.scorer),
                       what=f"this request's {cfg.method!r} selection")
    # A searched order is not a greedy ranking (a later chunk may pay off only after an
    # earlier one), so `min_gain` cuts only the greedy baselines after the fact.
    sentence = r.candidates.parents is not None
    order, gains, curve = solve_lib.picks(
        out, n=len(passages), k=None if sentence else k,
        min_gain=min_gain if cfg.method in methods.BASELINES else None,
        pinned=0 if r.constraints is None else len(r.constraints[0]))
    if sentence:  # `k` and the caps count passages
      order, gains, curve = granularity_lib.within((order, gains, curve), r.candidates.parents,
                                                   k=k, constraints=r.constraints)
    rel = out.relevance[:len(r.queries), :len(passages)] if r.queries else None

    def build(order, gains, curve, budget=r.budget):
      picked = [passages[i] for i in order]
      result = SelectionResult(
          method=cfg.method, queries=r.queries, passages=picked, indices=order,
          scores=None if rel is None else rel.max(axis=0)[order],
          gains=gains.astype(np.float32), curve=curve.astype(np.float32),
          cost=int(sum(p.tokens for p in picked)),
          budget=float(r.budget) if np.isfinite(r.budget) else None, candidates=passages,
          candidate_scores=rel, documents=r.candidates.documents, unit=cfg.unit,
          **_certificate(out, cfg.method))
      if r.candidates.parents is None:
        return result
      return granularity_lib.merge(result, r.candidates.parents, r.candidates.units,
                                   self.tokenizer, budget, own_costs=r.candidates.sent is None)

    if r.candidates.parents is None or cfg.method != "corag" or not cfg.top_up:
      return build(order, gains, curve)
    c = r.candidates
    return granularity_lib.top_up(
        build, (order, gains, curve), costs=c.costs, relevance=rel.max(axis=0), parents=c.parents,
        budget=r.budget, k=k, constraints=r.constraints, skip=r.repeats,
        **self._links(r),
        sent_cost=None if c.sent is None else lambda res: reader_lib.sent_cost(res, self.tokenizer))

  @staticmethod
  def _links(r: _Request) -> dict:
    """The text signals' `links` `[N, N]` and `groups` `[N]` over all of `r`'s candidates
    (the sentence top-up's): those of the searched ones, where the search had a width (no
    links from or to the others; the groups of all, `bridge.group_ids`)."""
    sig = r.signals
    if sig is None:
      return {"links": None, "groups": None}
    if r.searched is None:
      return {"links": sig.links, "groups": sig.groups}
    ps, idx = r.candidates.passages, r.searched
    links = np.zeros((len(ps), len(ps)), np.float32)
    links[np.ix_(idx, idx)] = sig.links
    return {"links": links,
            "groups": group_ids([p.doc for p in ps], [p.title for p in ps])}

  # -- selection -------------------------------------------------------------------------------
  def select(self, queries=None, documents_or_index=None, *, budget=None, k: Optional[int] = None,
             min_gain: Optional[float] = None, embeddings=None,
             query_embeddings=None, sources=None, pinned=None, groups=None,
             max_per_group: Optional[int] = None,
             granularity: str = "passage") -> SelectionResult:
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
      granularity: ``"passage"`` (the default: each candidate is sent whole) or ``"sentence"``:
        the candidates are the passages' sentences, and each passage is sent whole or as runs
        of its picked sentences (with its title where a run does not hold it), all within the
        one budget; `k`, `pinned` and `max_per_group` still count passages (the sentences'
        passages: parts of at most `k` of them are sent). See docs/pipeline.md.
    """
    granularity_lib.check_granularity(granularity, unit=self.config.unit,
                                      embeddings=embeddings is not None)
    queries = cands_lib.as_queries(queries)
    if self.config.method is None:
      return self.resolved(queries).select(
          queries, documents_or_index, budget=budget, k=k, min_gain=min_gain,
          embeddings=embeddings, query_embeddings=query_embeddings, sources=sources,
          pinned=pinned, groups=groups, max_per_group=max_per_group, granularity=granularity)
    min_gain = self.config.min_gain if min_gain is None else min_gain
    cands_lib.check_queries(self.config.method, queries)  # before any embedding
    cands = self._candidates(queries, documents_or_index, embeddings, sources, budget, granularity)
    budget = cands_lib.check_budget(budget, k, cands.costs)
    q_emb = cands_lib.query_embeddings(queries, query_embeddings, cands.embeddings.shape[1],
                                       self._embedder)
    cons = self._check_pinned(cands_lib.constraints(
        cands, pinned, groups, max_per_group, budget=budget, k=k,
        index=isinstance(self.index if documents_or_index is None else documents_or_index,
                         VectorIndex) and embeddings is None))
    r = self._request(queries, cands, q_emb, budget, cons)
    out, = self._solve([r], k=k, min_gain=min_gain)
    return self._fitted(r, self._result(r, out, k=k, min_gain=min_gain))

  def select_many(self, requests: Sequence, *, budget=None, k: Optional[int] = None,
                  min_gain: Optional[float] = None, pinned: Optional[Sequence] = None,
                  groups: Optional[Sequence] = None, max_per_group: Optional[int] = None,
                  embeddings: Optional[Sequence] = None,
                  query_embeddings: Optional[Sequence] = None,
                  granularity: str = "passage") -> list:
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
    requests = list(requests)
    per_request = {"pinned": pinned, "groups": groups, "embeddings": embeddings,
                   "query_embeddings": query_embeddings}
    for name, per in per_request.items():
      if per is not None and (isinstance(per, (str, bytes)) or len(per) != len(requests)):
        raise ValueError(f"`{name}` must hold one entry per request ({len(requests)}), or be None.")
      per_request[name] = [None] * len(requests) if per is None else list(per)
    pinned, groups, embeddings, query_embeddings = per_request.values()
    granularity_lib.check_granularity(granularity, unit=self.config.unit,
                                      embeddings=any(e is not None for e in embeddings))
    min_gain = self.config.min_gain if min_gain is None else min_gain
    if not requests:
      raise ValueError("`requests` is empty; pass a list of (queries, documents) pairs.")
    if self.config.method is None:  # the default per request: one batch per method
      by_method = collections.defaultdict(list)
      for r, req in enumerate(requests):
        if not isinstance(req, (tuple, list)) or len(req) != 2:
          raise TypeError(f"`requests[{r}]` must be a (queries, documents) pair.")
        by_method[self.method_for(req[0])].append(r)
      results = [None] * len(requests)
      for method, rows in by_method.items():
        outs = self.replace(method=method).select_many(
            [requests[r] for r in rows], budget=budget, k=k, min_gain=min_gain,
            pinned=[pinned[r] for r in rows], groups=[groups[r] for r in rows],
            max_per_group=max_per_group, embeddings=[embeddings[r] for r in rows],
            query_embeddings=[query_embeddings[r] for r in rows], granularity=granularity)
        for r, out in zip(rows, outs):
          results[r] = out
      return results
    split = lambda docs: self.split(docs, budget=budget)  # noqa: E731
    given = {}  # request -> `Candidates` with the caller's embeddings (as `select` takes them)
    checked = []
    for r, req in enumerate(requests):
      if embeddings[r] is None:
        checked.append(cands_lib.batch_request(r, req, split, method=self.config.method))
        continue
      q, items, _ = cands_lib.batch_request(r, req, lambda docs: docs, method=self.config.method)
      try:
        given[r] = cands_lib.from_embeddings(items, embeddings[r], self.tokenizer)
      except (TypeError, ValueError) as e:
        raise type(e)(f"`embeddings[{r}]`: {e}") from None
      checked.append((q, given[r].passages, None))
    extra = [()] * len(checked)  # granularity="sentence": each request's (parents, passages)
    if granularity == "sentence":
      cut = [granularity_lib.sentences(ps, self.tokenizer) for _, ps, _ in checked]
      checked, extra = [(q, c[0], docs) for (q, _, docs), c in zip(checked, cut)], [c[1:] for c in cut]
    sent = [None if docs is None else self._sent(cands_lib.Candidates(ps, None, None, docs)).sent
            for _, ps, docs in checked]
    budgets = [cands_lib.check_budget(budget, k, np.asarray([p.tokens for p in ps]) if s is None
                                      else s) for (_, ps, _), s in zip(checked, sent)]
    # Each request is embedded as `select` embeds it (its passages in one encoder call, its
    # queries in another): an encoder's float sums depend on what shares a batch, and a
    # last-bit difference can swap a near tie, so one request must not be embedded two ways.
    # The solves are batched.
    cons = [self._check_pinned(cands_lib.constraints(
        cands_lib.Candidates(ps, None, None, docs, s, *extra[r]), pinned[r], groups[r], max_per_group,
        budget=b, k=k, name=f"requests[{r}]."), f"requests[{r}].pinned")
            for r, ((_, ps, docs), b, s) in enumerate(zip(checked, budgets, sent))]
    prepared = []
    for r, ((q, ps, docs), b, s) in enumerate(zip(checked, budgets, sent)):
      if r in given:
        cands = given[r]
      elif self.late_chunking and docs is not None:
        e = self._embedder.late_chunks(docs, ps)
        cands = cands_lib.Candidates(ps, e, e, docs, s, *extra[r])
      else:
        cands = cands_lib.Candidates(ps, *self._embedder.passages([p.sent_text for p in ps]), docs,
                                     s, *extra[r])
      try:
        q_emb = None if not q and query_embeddings[r] is None else cands_lib.query_embeddings(
            q, query_embeddings[r], cands.embeddings.shape[1], self._embedder)
      except (TypeError, ValueError) as e:
        raise type(e)(f"`query_embeddings[{r}]`: {e}") from None
      prepared.append(self._request(q, cands, q_emb, b, cons[r]))
    outs = self._solve(prepared, k=k, min_gain=min_gain)
    return [self._fitted(r, self._result(r, out, k=k, min_gain=min_gain))
            for r, out in zip(prepared, outs)]

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
    if not isinstance(query, str):
      raise TypeError(f"`query` must be one question (a str), got {type(query).__name__}.")
    checks.static_int(max_new_tokens, "max_new_tokens", 1, what="the longest answer in tokens")
    checks.choice(order, "order", ORDERS)
    checks.token_budget(budget, none="256, or what the window leaves")
    t0 = time.perf_counter()
    # The offline default's model is loaded once per process (`default_generator`); nothing
    # is stored on the Pipeline: `answer` leaves it as it was.
    generator = self.generator if self.generator is not None else default_generator()
    pipe = self if self.generator is generator else self.replace(generator=generator)
    if template is None:
      template = DEFAULT_TEMPLATE
    limit = None
    if context_window is not None:
      limit, room = reader_lib.window_room(generator, query, template,
                                           context_window=context_window,
                                           max_new_tokens=max_new_tokens)
      budget = room if budget is None else min(budget, room)
    selection = pipe.select(query, documents_or_index,
                            budget=DEFAULT_ANSWER_BUDGET if budget is None else budget,
                            **select_kwargs)
    selection, prompt = reader_lib.fit_prompt(selection, generator, pipe.tokenizer,
                                              template=template, order=order, limit=limit)
    t1 = time.perf_counter()
    text = generator.generate([prompt], max_new_tokens=max_new_tokens)[0]
    t2 = time.perf_counter()
    return Answer(text=text, selection=selection, prompt=prompt, generator=generator.name,
                  timings={"select": t1 - t0, "generate": t2 - t1})

"""From documents and queries to an ordered, budgeted context: split, embed, select, lay out.

Shape legend: B requests, Q queries, N candidate passages, K picks, D embedding dimension.

`Pipeline.select` is a thin, inspectable composition of library functions:

1. `jaxsel.text.split_documents` cuts the documents into sentences or passages with spans and
   token costs (or the candidates come from a `VectorIndex`, retrieved by the queries);
2. the encoder embeds queries and passages: relevance `r_qj` uses asymmetric encoding (the
   model's query and passage prompts, when it defines them) and passage–passage similarity
   `s_ij` symmetric encoding; both are cosines made non-negative with `jaxsel.nonnegative`;
3. an objective and `jaxsel.greedy` (or a baseline / the CORAG search) picks passages in order
   within the token budget;
4. `SelectionResult` holds the picks with their scores, gains, cost and saturation curve, and
   `prompt()` lays out the context and the query for an LLM.

`select_many` runs many independent requests in one call: one encoder pass over all texts,
candidates padded to a common N with a `valid` mask, and one `jax.vmap`-ed greedy.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import importlib.util
import inspect
import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel import text as text_lib
from jaxsel.greedy import UNSELECTED, Selection, greedy, saturation_point
from jaxsel.index import VectorIndex
from jaxsel.objectives import (cosine_similarity, coverage, facility_location, nonnegative,
                               saturated_coverage)

SUBMODULAR = ("facility_location", "saturated_coverage", "coverage")
CORAG_SCORERS = ("facility_location", "saturated_coverage", "relevance")
NEEDS_QUERY = ("facility_location", "saturated_coverage", "mmr", "naive", "corag")

DEFAULT_TEMPLATE = (
    "Answer the question using only the context below.\n\n"
    "Context:\n{context}\n\n"
    "Question: {query}\n"
    "Answer:")
TEXT_TEMPLATE = "{context}"


def available_methods() -> tuple:
  """Selection methods this installation can run (the baselines and search are optional)."""
  methods = list(SUBMODULAR)
  if importlib.util.find_spec("jaxsel.baselines") is not None:
    methods += ["mmr", "naive"]
  if importlib.util.find_spec("jaxsel.search") is not None and \
      importlib.util.find_spec("jaxsel.scorers") is not None:
    methods.append("corag")
  return tuple(methods)


@dataclasses.dataclass
class SelectionResult:
  """What `Pipeline.select` picked, in pick order, and why.

  Arrays are NumPy, `[K]` over the picks unless said otherwise.
  """
  method: str
  queries: list  # the Q query strings ([] for text selection)
  passages: list  # [K] picked `Passage`s in pick order
  indices: np.ndarray  # [K] their positions in `candidates`
  scores: Optional[np.ndarray]  # [K] relevance of each pick (max over queries); None without queries
  gains: np.ndarray  # [K] marginal gain of each pick under the method's objective
  curve: np.ndarray  # [K] objective value after each pick: the saturation curve
  cost: int  # tokens of all picks
  budget: Optional[float]
  candidates: list  # [N] every candidate `Passage`
  candidate_scores: Optional[np.ndarray] = None  # [Q, N] relevance r_qj (non-negative)
  documents: Optional[list] = None  # the source documents, when the pipeline split them

  @property
  def saturation(self) -> int:
    """Number of picks before the marginal gain falls below 5% of the first pick's."""
    g = jnp.asarray(self.gains, jnp.float32)
    sel = Selection(indices=jnp.asarray(self.indices, jnp.int32), gains=g, values=g,
                    count=jnp.asarray(len(g), jnp.int32), cost=jnp.zeros(()))
    return int(saturation_point(sel))

  def __len__(self) -> int:
    return len(self.passages)

  def context(self, *, order: str = "selection", numbered: bool = True) -> str:
    """The picked passages joined into one context. `order`: ``"selection"`` (pick order, most
    valuable first) or ``"document"`` (source order, for reading)."""
    if order not in ("selection", "document"):
      raise ValueError(f"Unknown `order` {order!r}; use 'selection' or 'document'.")
    ps = list(self.passages)
    if order == "document":
      ps.sort(key=lambda p: (p.doc, p.start))
    if not numbered:
      return "\n\n".join(p.text for p in ps)
    return "\n\n".join(f"[{i + 1}] {p.text}" for i, p in enumerate(ps))

  def prompt(self, template: Optional[str] = None, *, order: str = "selection",
             numbered: bool = True) -> str:
    """The prompt for an LLM: `template` with `{context}` and `{query}` filled in.

    The default template asks to answer the query (queries joined by newlines) from the
    context; without queries it is the context alone.
    """
    if template is None:
      template = DEFAULT_TEMPLATE if self.queries else TEXT_TEMPLATE
    if "{context}" not in template:
      raise ValueError("`template` must contain '{context}' (and usually '{query}').")
    return template.replace("{query}", "\n".join(self.queries)).replace(
        "{context}", self.context(order=order, numbered=numbered))

  def to_dict(self) -> dict:
    """A JSON-serialisable summary (the `jaxsel select --json` schema)."""
    picks = []
    for rank, (p, i, g, v) in enumerate(zip(self.passages, self.indices, self.gains, self.curve)):
      picks.append({
          "rank": rank + 1, "candidate": int(i), "text": p.text, "doc": p.doc,
          "source": p.source, "start": p.start, "end": p.end, "tokens": p.tokens,
          "score": None if self.scores is None else float(self.scores[rank]),
          "gain": float(g), "value": float(v)})
    return {"method": self.method, "queries": list(self.queries), "budget": self.budget,
            "cost": int(self.cost), "num_candidates": len(self.candidates),
            "saturation": self.saturation, "selected": picks}

  def table(self, *, width: int = 100) -> str:
    """A human-readable table of the picks."""
    head = f"{'#':>3}  {'tokens':>6}  {'score':>6}  {'gain':>8}  {'value':>8}  passage"
    lines = [head, "-" * min(width, len(head) + 40)]
    room = max(20, width - len(head) + len("passage"))
    for rank, p in enumerate(self.passages):
      snippet = " ".join(p.text.split())
      if len(snippet) > room:
        snippet = snippet[:room - 1] + "\u2026"
      score = "-" if self.scores is None else f"{self.scores[rank]:.3f}"
      lines.append(f"{rank + 1:>3}  {p.tokens:>6}  {score:>6}  {self.gains[rank]:>8.3f}  "
                   f"{self.curve[rank]:>8.3f}  {snippet}")
    budget = "none" if self.budget is None else f"{self.budget:g}"
    lines.append(f"{len(self.passages)} of {len(self.candidates)} candidates, {self.cost} tokens "
                 f"(budget {budget}), method {self.method}, saturation after {self.saturation} picks")
    return "\n".join(lines)

  def plot(self, path=None, *, ax=None):
    """Plots the saturation curve (objective value and marginal gain per pick); saves a PNG to
    `path` when given. Returns the matplotlib figure."""
    if ax is not None:
      fig = ax.figure
    elif path is not None:  # no pyplot: works without a display and leaves its backend alone
      from matplotlib.figure import Figure
      fig = Figure(figsize=(6, 3.5))
      ax = fig.subplots()
    else:
      import matplotlib.pyplot as plt
      fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(1, len(self.curve) + 1)
    tokens = np.cumsum([p.tokens for p in self.passages])
    ax.plot(x, self.curve, "o-", label="objective value f(S)")
    ax.bar(x, self.gains, alpha=0.35, label="marginal gain")
    if len(x) and self.saturation < len(x):
      ax.axvline(self.saturation + 0.5, color="grey", ls="--", label="saturation")
    ax.set_xlabel("picks (cumulative tokens: " + ", ".join(map(str, tokens[:8]))
                  + (", …" if len(tokens) > 8 else "") + ")")
    ax.set_ylabel("value")
    ax.set_title(f"{self.method}: saturation curve")
    ax.legend(loc="center right")
    fig.tight_layout()
    if path is not None:
      fig.savefig(path, dpi=120)
    return fig


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
  return queries


class Pipeline:
  """Selects the passages that belong in an LLM's context window, in order, within a budget.

  Example:
    >>> enc = jaxsel.load_encoder(path_to_all_MiniLM_L6_v2)
    >>> pipe = jaxsel.Pipeline(enc, method="facility_location")
    >>> res = pipe.select("Who wrote it?", [document], budget=256)
    >>> print(res.table()); llm(res.prompt())

  Args:
    encoder: anything with `encode(texts, *, prompt=None, normalize=True) -> [N, D]` and,
      for token costs, a Hugging Face `tokenizer` attribute (see `jaxsel.load_encoder`).
    index: a default `VectorIndex` to select from when `select` gets no documents.
    method: one of `available_methods()`: ``"facility_location"`` (relevance-weighted
      representativeness, multi-query), ``"saturated_coverage"`` (each passage needs only
      as much coverage as it is relevant), ``"coverage"`` (text selection, no query),
      ``"mmr"``, ``"naive"`` (relevance order, fill the budget), ``"corag"`` (tree search over
      ordered combinations).
    unit, max_tokens: how documents are split (`jaxsel.text.split_text`).
    greedy_method: ``"lazy"`` (default), ``"dense"`` or ``"stochastic"`` (see `jaxsel.greedy`).
    nonneg: how cosines become non-negative (`jaxsel.nonnegative`), default ``"clip"``.
    candidates: how many passages to retrieve from an index per query before selecting.
    diversity: MMR's weight on redundancy, in [0, 1] (0 is relevance order).
    corag_scorer: what the CORAG search maximises: a name in `CORAG_SCORERS` (the objective
      of that name with a position `discount`, or discounted relevance), a name from the
      configuration agent's menu (`jaxsel.labels.SCORERS`: e.g. ``"links"``, relevance plus a
      bonus for a passage whose title appears in an earlier one; titles are `Passage.title`),
      or a callable `(relevance [Q, N], similarity [N, N]) -> scorer` (see `jaxsel.scorers`).
    discount: position discount of the CORAG scorers (earlier chunks count more).
    iterations, exploration, cost_penalty, max_depth: CORAG search settings; with `agent`
      (a `jaxsel` configuration agent) set, it predicts the scorer and these settings from
      the query embedding (the mean over queries). `max_depth` also caps mmr/naive picks.
    batch_size: texts per compiled encoder call; `progress`: show the encoder's progress bar.
    min_gain: default of `select(min_gain=...)`: a pick whose marginal gain is below it is
      not taken (the default 1e-6 drops picks that add nothing; None keeps filling the budget).
    dense_limit: above this many candidates the submodular methods use the matrix-free
      objectives of `jaxsel.large` (memory `O(N·D)` instead of the `[N, N]` similarity).
    cache_size: how many recent `embed` results to keep (same texts and prompt are not
      embedded again; `replace` copies share the cache); 0 turns caching off.
  """

  def __init__(self, encoder, index: Optional[VectorIndex] = None,
               method: str = "facility_location", *, unit: str = "passage",
               max_tokens: Optional[int] = None, greedy_method: str = "lazy",
               nonneg: str = "clip", candidates: int = 64, diversity: float = 0.3,
               corag_scorer="facility_location", discount: float = 0.9,
               iterations: int = 16, exploration: float = 2.4, cost_penalty: float = 0.1,
               max_depth: Optional[int] = None, agent=None, batch_size: int = 64,
               progress: bool = False, min_gain: Optional[float] = 1e-6, cache_size: int = 8,
               dense_limit: int = 4096):
    if encoder is None or not callable(getattr(encoder, "encode", None)):
      raise TypeError("`encoder` must have an `encode(texts, ...)` method, e.g. "
                      "`jaxsel.load_encoder(name_or_path)`.")
    methods = available_methods()
    if method not in methods:
      raise ValueError(f"Unknown `method` {method!r}; use one of {', '.join(map(repr, methods))}.")
    if unit not in text_lib.UNITS:
      raise ValueError(f"Unknown `unit` {unit!r}; use one of {', '.join(map(repr, text_lib.UNITS))}.")
    if index is not None and not isinstance(index, VectorIndex):
      raise TypeError(f"`index` must be a jaxsel VectorIndex or None, got {type(index).__name__}.")
    for name, v in (("candidates", candidates), ("batch_size", batch_size), ("iterations", iterations)):
      if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"`{name}` must be a positive int, got {v!r}.")
    nonnegative(jnp.zeros(()), method=nonneg)  # validates the name
    self.encoder = encoder
    self.index = index
    self.method = method
    self.unit = unit
    self.max_tokens = max_tokens
    self.greedy_method = greedy_method
    self.nonneg = nonneg
    self.candidates = candidates
    self.diversity = diversity
    self.corag_scorer = corag_scorer
    self.discount = discount
    self.iterations = iterations
    self.exploration = exploration
    self.cost_penalty = cost_penalty
    self.max_depth = max_depth
    self.agent = agent
    self.batch_size = batch_size
    self.progress = progress
    self.min_gain = min_gain
    self.cache_size = cache_size
    self.dense_limit = dense_limit
    self._cache = collections.OrderedDict()  # (prompt prefix, texts) -> embeddings

  # -- embedding -------------------------------------------------------------------------------
  @property
  def tokenizer(self):
    return getattr(self.encoder, "tokenizer", None)

  def _prefix(self, role: Optional[str]):
    prompts = getattr(self.encoder, "prompts", None)
    return prompts.get(role, "") if isinstance(prompts, dict) and role else ""

  def _prompt_name(self, role: str) -> Optional[str]:
    """The encoder's prompt name for `role` when it defines one, else None (no prompt)."""
    prompts = getattr(self.encoder, "prompts", None)
    return role if isinstance(prompts, dict) and role in prompts else None

  def embed(self, texts: Sequence[str], role: str = "passage") -> np.ndarray:
    """Normalised embeddings `[N, D]` of `texts` with the encoder's prompt for `role`
    (``"query"``, ``"passage"`` or ``"symmetric"``)."""
    texts = list(texts)
    if not texts:
      raise ValueError("Nothing to embed: the input has no text.")
    kwargs = {"normalize": True}
    name = self._prompt_name(role)
    if name is not None:
      kwargs["prompt_name"] = name
    params = inspect.signature(self.encoder.encode).parameters
    if "batch_size" in params:
      kwargs["batch_size"] = self.batch_size
    if "progress" in params:
      kwargs["progress"] = self.progress
    key = (self._prefix(role) if name else None, tuple(texts))
    if key in self._cache:
      self._cache.move_to_end(key)
      return self._cache[key]
    out = np.asarray(self.encoder.encode(texts, **kwargs), np.float32)
    if self.cache_size:
      out.flags.writeable = False  # shared by later calls: nobody may change it in place
      self._cache[key] = out
      while len(self._cache) > self.cache_size:
        self._cache.popitem(last=False)
    return out

  def replace(self, **changes) -> "Pipeline":
    """A copy with some settings changed (e.g. `method=`), sharing the encoder, the index
    and the embedding cache, so comparing methods embeds the texts once."""
    new = copy.copy(self)
    for name, value in changes.items():
      if name.startswith("_") or not hasattr(self, name):
        raise TypeError(f"Pipeline has no setting {name!r}.")
      setattr(new, name, value)
    if "encoder" in changes:  # embeddings of another model are not reusable
      new._cache = collections.OrderedDict()
    methods = available_methods()
    if new.method not in methods:
      raise ValueError(f"Unknown `method` {new.method!r}; use one of {', '.join(map(repr, methods))}.")
    return new

  def _passage_embeddings(self, texts):
    """(asymmetric passage embeddings for relevance, symmetric ones for similarity).

    Symmetric encoding uses the encoder's ``"symmetric"`` prompt if it has one, else no
    prompt; when that equals the passage prompt (e.g. all-MiniLM-L6-v2, which has none) the
    passages are embedded once.
    """
    e = self.embed(texts, "passage")
    if self._prefix("symmetric") == self._prefix("passage"):
      return e, e
    return e, self.embed(texts, "symmetric")

  def split(self, documents, *, sources=None) -> list:
    """Splits documents into candidate `Passage`s with this pipeline's unit and tokenizer."""
    return text_lib.split_documents(documents, unit=self.unit, max_tokens=self.max_tokens,
                                    tokenizer=self.tokenizer, sources=sources)

  def build_index(self, documents, *, sources=None, index: Optional[VectorIndex] = None,
                  info: Optional[dict] = None) -> VectorIndex:
    """Splits and embeds `documents` into `index` (a new `VectorIndex` by default). Each
    vector's metadata is its `Passage` (doc, source, span, tokens)."""
    passages = self.split(documents, sources=sources)
    if not passages:
      raise ValueError("`documents` contain no text to index.")
    emb = self.embed([p.text for p in passages], "passage")
    if index is None:
      index = VectorIndex(emb.shape[1], info={"unit": self.unit, "max_tokens": self.max_tokens,
                                              **(info or {})})
    meta = [{k: v for k, v in p.to_dict().items() if k != "text"} for p in passages]
    index.add(emb, texts=[p.text for p in passages], metadata=meta)
    return index

  # -- candidates ------------------------------------------------------------------------------
  def _candidates(self, queries, source):
    """-> (passages, passage embeddings, symmetric embeddings, documents or None)."""
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
    e, s = self._passage_embeddings([p.text for p in passages])
    return passages, e, s, docs

  def _from_index(self, queries, index: VectorIndex):
    if not len(index):
      raise ValueError("The index is empty; add passages first (`Pipeline.build_index`).")
    if queries:
      hits = index.search(self.embed(queries, "query"), k=min(self.candidates, len(index)))
      ids = list(dict.fromkeys(int(i) for i in np.asarray(hits.indices).T.reshape(-1) if i >= 0))
    elif len(index) <= max(self.candidates, 1024):
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
  def _check(self, queries, budget, k, costs, n):
    if self.method in NEEDS_QUERY and not queries:
      raise ValueError(f"method {self.method!r} ranks passages for a query; pass `queries`, or "
                       "use method='coverage' for text selection without a query.")
    if self.method == "coverage" and queries:
      raise ValueError("method 'coverage' is text selection: it covers the documents and takes no "
                       "query (it would be ignored). Pass `queries=None`, or use "
                       "method='facility_location' or 'saturated_coverage' to select for the queries.")
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
    return n if k is None else min(int(k), n)

  def relevance(self, query_emb, passage_emb) -> jax.Array:
    """Non-negative relevance `[Q, N]`: `jaxsel.cosine_similarity` with this pipeline's `nonneg`."""
    return cosine_similarity(query_emb, passage_emb, nonneg=self.nonneg)

  def similarity(self, sym_emb) -> jax.Array:
    """Non-negative passage–passage similarity `[N, N]`: `jaxsel.cosine_similarity`."""
    return cosine_similarity(sym_emb, nonneg=self.nonneg)

  def objective(self, relevance, similarity, valid=None):
    """The submodular objective of this pipeline's method (one instance or a batch)."""
    if self.method == "coverage":
      return coverage(similarity, valid=valid)
    if self.method == "facility_location":
      return facility_location(similarity, relevance, valid=valid)
    return saturated_coverage(similarity, relevance, valid=valid)

  def _objective_from(self, relevance, sym_emb):
    """The method's objective; above `dense_limit` candidates the matrix-free form (gains in
    blocks from the embeddings, never the `[N, N]` similarity), which picks the same."""
    n = sym_emb.shape[0]
    if n <= self.dense_limit or self.nonneg not in ("clip", "shift", "square"):
      return self.objective(relevance, self.similarity(sym_emb))
    from jaxsel import large
    e = jnp.asarray(sym_emb)
    if self.method == "saturated_coverage":
      return large.saturated_coverage_from_embeddings(e, relevance, nonneg=self.nonneg)
    rel = None if self.method == "coverage" else relevance
    return large.facility_location_from_embeddings(e, rel, nonneg=self.nonneg)

  def select(self, queries=None, documents_or_index=None, *, budget=None, k: Optional[int] = None,
             min_gain: Optional[float] = None) -> SelectionResult:
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
    """
    queries = _as_queries(queries)
    min_gain = self.min_gain if min_gain is None else min_gain
    if (self.method in NEEDS_QUERY and not queries) or (self.method == "coverage" and queries):
      self._check(queries, None, None, [], 0)  # before any embedding
    passages, emb, sym, docs = self._candidates(queries, documents_or_index)
    costs = np.asarray([p.tokens for p in passages], np.float32)
    k = self._check(queries, budget, k, costs, len(passages))
    q_emb = self.embed(queries, "query") if queries else None
    rel = None if q_emb is None else self.relevance(q_emb, emb)
    sim = None if self.method in SUBMODULAR else self.similarity(sym)
    if self.method in SUBMODULAR:
      sel = greedy(self._objective_from(rel, sym), k=k,
                   costs=None if budget is None else costs,
                   budget=None if budget is None else float(budget),
                   min_gain=min_gain, method=self.greedy_method,
                   key=jax.random.key(0) if self.greedy_method == "stochastic" else None)
      order, gains, curve = _trim(sel.indices, sel.gains, sel.values, sel.count)
    else:
      order, gains, curve = self._other(rel, sim, costs, budget, k, min_gain, q_emb, queries,
                                        passages, emb)
    return self._result(queries, passages, rel, order, gains, curve, budget, docs)

  def _result(self, queries, passages, rel, order, gains, curve, budget, docs):
    rel_np = None if rel is None else np.asarray(rel)
    picked = [passages[i] for i in order]
    return SelectionResult(
        method=self.method, queries=queries, passages=picked, indices=np.asarray(order, np.int64),
        scores=None if rel_np is None else rel_np.max(axis=0)[np.asarray(order, np.int64)],
        gains=np.asarray(gains, np.float32), curve=np.asarray(curve, np.float32),
        cost=int(sum(p.tokens for p in picked)),
        budget=None if budget is None else float(budget), candidates=passages,
        candidate_scores=rel_np, documents=docs)

  def scorer(self, name, relevance, similarity, *, discount: Optional[float] = None,
             features=None):
    """The CORAG scorer `name` for one request, with position `discount` (default the
    pipeline's): a name in `CORAG_SCORERS`, a name of the configuration agent's scorer menu
    (`jaxsel.labels.SCORERS`, e.g. ``"links"``; built from `features`, a `jaxsel.qa.QAFeatures`),
    or a callable `(relevance [Q, N], similarity [N, N]) -> scorer`."""
    from jaxsel import scorers
    discount = self.discount if discount is None else discount
    if callable(name):
      return name(relevance, similarity)
    if name == "relevance":
      return scorers.relevance_scorer(jnp.max(relevance, axis=0), discount=discount)
    if name in ("facility_location", "saturated_coverage", "coverage"):
      obj = {"facility_location": facility_location, "saturated_coverage": saturated_coverage}.get(name)
      obj = coverage(similarity) if obj is None else obj(similarity, relevance)
      return scorers.objective_scorer(obj, discount=discount)
    menu = _agent_scorers()
    if name in menu and features is not None:
      return menu[name](features)
    raise ValueError(f"Unknown CORAG scorer {name!r}; use one of "
                     f"{', '.join(map(repr, dict.fromkeys(CORAG_SCORERS + tuple(menu))))} "
                     "or a callable (relevance, similarity) -> scorer.")

  def features(self, queries, q_emb, emb, passages, costs):
    """The configuration agent's per-question features (`jaxsel.qa.QAFeatures`): the mean
    query embedding, passage embeddings and costs, title links between passages
    (`Passage.title`, e.g. Markdown headings) and titles the queries mention."""
    from jaxsel.qa import QAFeatures
    from jaxsel.scorers import title_links
    q = np.mean(np.asarray(q_emb, np.float32), axis=0)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    texts = [p.text for p in passages]
    titles = [p.title or "" for p in passages]
    n = len(passages)
    return QAFeatures(
        query=q, passages=np.asarray(emb, np.float32), costs=np.asarray(costs, np.float32),
        links=title_links(texts, titles),
        mentioned=title_links([" ".join(queries)] + texts, [""] + titles)[0, 1:],
        gold=np.zeros(n, bool), valid=np.ones(n, bool))

  def _other(self, rel, sim, costs, budget, k, min_gain, q_emb, queries, passages, emb):
    """naive / mmr / corag: (order [K], gains [K], curve [K]) under the method's scorer."""
    from jaxsel import baselines, search
    n = costs.shape[0]
    depth = min(k, self.max_depth or n)
    total = float(budget) if budget is not None else float(costs.sum())
    r = jnp.max(rel, axis=0)
    if self.method == "naive":
      scorer = self.scorer("relevance", rel, sim, discount=1.0)  # curve: total relevance
      res = baselines.naive_rag(scorer, costs, budget=total, max_depth=depth, relevance=r)
    elif self.method == "mmr":
      scorer = self.scorer("facility_location", rel, sim, discount=1.0)  # curve: f(S)
      res = baselines.mmr(scorer, costs, budget=total, similarity=sim, diversity=self.diversity,
                          max_depth=depth, relevance=r)
    else:
      name, settings = self.corag_scorer, {"iterations": self.iterations,
                                           "exploration": self.exploration,
                                           "cost_penalty": self.cost_penalty}
      if self.agent is not None:  # the configuration agent picks scorer and settings per query
        choice = self.agent.predict(np.mean(q_emb, axis=0))
        name, settings = choice.scorer, choice.search_kwargs()
      feats = None
      if isinstance(name, str) and name not in CORAG_SCORERS:
        feats = self.features(queries, q_emb, emb, passages, costs)
      scorer = self.scorer(name, rel, sim, features=feats)
      res = search.corag_search(scorer, costs, budget=total, max_depth=depth, **settings)
      if bool(res.tree.nonfinite):
        raise ValueError(f"The CORAG scorer {name!r} returned NaN or infinite values for this "
                         "request; the search stopped. Check the scorer (and its model's inputs).")
    order = np.asarray(res.order)[:int(res.length)]
    curve, gains = _prefix_values(scorer, order, depth)
    # A searched order is not a greedy ranking (a later chunk may pay off only after an
    # earlier one), so `min_gain` cuts only the greedy baselines.
    if min_gain is not None and self.method != "corag":
      low = np.nonzero(gains < min_gain)[0]
      if len(low):
        order, gains, curve = order[:low[0]], gains[:low[0]], curve[:low[0]]
    return order.astype(np.int64), gains, curve

  def select_many(self, requests: Sequence, *, budget=None, k: Optional[int] = None,
                  min_gain: Optional[float] = None) -> list:
    """Runs independent requests `[(queries, documents), ...]` in one batched call.

    All texts are embedded together; the candidate sets are padded to a common N (with a
    `valid` mask) and selected by one `jax.vmap`-ed greedy for the submodular methods (other
    methods run request by request). Results equal `select` on each request.
    """
    requests = list(requests)
    min_gain = self.min_gain if min_gain is None else min_gain
    if not requests:
      raise ValueError("`requests` is empty; pass a list of (queries, documents) pairs.")
    if self.method not in SUBMODULAR:
      return [self.select(q, d, budget=budget, k=k, min_gain=min_gain) for q, d in requests]
    qs, cands = [], []
    for r, req in enumerate(requests):
      if not isinstance(req, (tuple, list)) or len(req) != 2:
        raise TypeError(f"`requests[{r}]` must be a (queries, documents) pair.")
      q = _as_queries(req[0])
      if isinstance(req[1], VectorIndex) or isinstance(req[1], str) or req[1] is None:
        raise TypeError(f"`requests[{r}]`: batched requests take documents or passages, not "
                        f"{type(req[1]).__name__}; use `select` for an index.")
      docs = list(req[1])
      if not docs:
        raise ValueError(f"`requests[{r}]` has no documents.")
      ps = docs if all(isinstance(p, text_lib.Passage) for p in docs) else self.split(docs)
      if not ps:
        raise ValueError(f"`requests[{r}]`: the documents contain no text.")
      self._check(q, budget, k, np.asarray([p.tokens for p in ps]), len(ps))
      qs.append(q)
      cands.append((ps, None if ps is docs else docs))
    # One encoder pass over every passage and every query of every request.
    all_p = [p.text for ps, _ in cands for p in ps]
    emb, sym = self._passage_embeddings(all_p)
    all_q = [x for q in qs for x in q]
    q_emb = self.embed(all_q, "query") if all_q else None
    b, n_max = len(requests), max(len(ps) for ps, _ in cands)
    q_max = max(1, max(len(q) for q in qs))
    dim = emb.shape[1]
    e_pad = np.zeros((b, n_max, dim), np.float32)
    s_pad = np.zeros((b, n_max, dim), np.float32)
    qe_pad = np.zeros((b, q_max, dim), np.float32)
    qvalid = np.zeros((b, q_max), bool)
    valid = np.zeros((b, n_max), bool)
    costs = np.zeros((b, n_max), np.float32)
    po = qo = 0
    for r, ((ps, _), q) in enumerate(zip(cands, qs)):
      n = len(ps)
      e_pad[r, :n], s_pad[r, :n] = emb[po:po + n], sym[po:po + n]
      valid[r, :n] = True
      costs[r, :n] = [p.tokens for p in ps]
      qe_pad[r, :len(q)] = 0 if q_emb is None else q_emb[qo:qo + len(q)]
      qvalid[r, :len(q)] = True
      po, qo = po + n, qo + len(q)
    rel = jnp.where(qvalid[:, :, None], jax.vmap(self.relevance)(qe_pad, e_pad), 0)
    sim = jax.vmap(self.similarity)(s_pad)
    obj = self.objective(None if self.method == "coverage" else rel, sim, valid=jnp.asarray(valid))
    kk = n_max if k is None else min(int(k), n_max)
    use_budget = budget is not None
    key = jax.random.key(0) if self.greedy_method == "stochastic" else None

    def one(o, c):
      return greedy(o, k=kk, costs=c if use_budget else None,
                    budget=float(budget) if use_budget else None, min_gain=min_gain,
                    method=self.greedy_method, key=key)

    sel = jax.vmap(one)(obj, jnp.asarray(costs))
    out = []
    for r, ((ps, docs), q) in enumerate(zip(cands, qs)):
      count = int(sel.count[r])
      limit = count if k is None else min(count, int(k), len(ps))
      order, gains, curve = _trim(sel.indices[r], sel.gains[r], sel.values[r], limit)
      r_rel = rel[r, :len(q), :len(ps)] if q else None
      out.append(self._result(q, ps, r_rel, order, gains, curve, budget, docs))
    return out


def _agent_scorers() -> dict:
  """The configuration agent's scorer menu (name -> builder of `QAFeatures`), if installed."""
  if importlib.util.find_spec("jaxsel.labels") is None:
    return {}
  from jaxsel import labels
  return dict(getattr(labels, "SCORERS", {}))


def _prefix_values(scorer, order: np.ndarray, depth: int):
  """Scorer values of every prefix of `order` (the curve) and their differences (gains)."""
  t = len(order)
  prefixes = np.full((t + 1, depth), UNSELECTED, np.int32)
  for i in range(1, t + 1):
    prefixes[i, :i] = order[:i]
  values = np.asarray(jax.vmap(scorer)(jnp.asarray(prefixes)), np.float32)
  return values[1:], np.diff(values)


def _trim(indices, gains, values, count):
  count = int(count)
  idx = np.asarray(indices)[:count]
  return idx.astype(np.int64), np.asarray(gains)[:count], np.asarray(values)[:count]

"""What the framework adapters share, free of any framework: settings checks, token counting,
the embedding-reuse rule, and one call to `Pipeline.select` over texts.

One behaviour in every framework's query path: an empty or whitespace-only candidate is never
picked (it would cost 0 tokens and say nothing), and a budget below the cheapest candidate
returns no candidates with a warning on the ``jaxsel.integrations`` logger (a postprocessor in
a chain should not break the chain). Bad settings (`budget=0`, a negative or fractional
budget) are refused when the adapter is built.

Shape legend: N candidates (nodes / documents), D embedding dimension.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

import jaxsel
from jaxsel.defaults import DEFAULT_GRANULARITY
ORDERS = ("input", "selection")
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_METHOD = jaxsel.default_method(True)  # the adapters always have a query
logger = logging.getLogger("jaxsel.integrations")
# What `jaxsel.token_counter` takes, or a callable `text -> int` / `text -> tokens`.
TokenizerLike = Any


def require(module: str, framework: str, extra: str) -> None:
  """Raises an ImportError that names the extra to install when `module` is missing (an adapter
  calls it before importing its framework)."""
  try:
    found = importlib.util.find_spec(module) is not None
  except ImportError:  # a parent package is missing
    found = False
  if not found:
    raise ImportError(f"jaxsel's {framework} adapter needs {framework} ({module} is not "
                      f'installed): pip install "jaxsel[{extra}]"')


class Pick(NamedTuple):
  """One selected candidate, or (granularity="sentence") a run of its sentences."""
  index: int  # position in the input list
  rank: int  # position in pick order (0: the first pick)
  score: float  # relevance to the query (cosine, clipped at 0)
  gain: float  # marginal gain under the method's objective when it was picked
  # A part of the candidate: its text, `content[start:end]`; None when it is kept whole.
  text: Optional[str] = None
  start: Optional[int] = None
  end: Optional[int] = None
  # What a part is sent with before `text`: its candidate's title as "title: " when the part
  # does not hold it (`title_key`), else "".
  prefix: str = ""

  @property
  def sent(self) -> Optional[str]:
    """A part as the adapter returns it (`prefix + text`); None when the candidate is whole."""
    return None if self.text is None else self.prefix + self.text

  def metadata(self) -> dict:
    """What an adapter adds to a kept candidate's metadata for a part of it."""
    return {} if self.text is None else {"jaxsel_start": self.start, "jaxsel_end": self.end}


# -- settings -------------------------------------------------------------------------------------
def check_method(method) -> str:
  jaxsel.Pipeline.check_pick(method=method)
  return method


def check_order(order) -> str:
  if not isinstance(order, str) or order not in ORDERS:
    raise ValueError(f"`order` must be one of {', '.join(map(repr, ORDERS))} ('input': the "
                     "candidates' own order; 'selection': pick order, most valuable first), got "
                     f"{order!r}.")
  return order


def check_settings(*, method, budget, k, order, group_by=None, max_per_group=None,
                   granularity=DEFAULT_GRANULARITY, title_key=None) -> None:
  """The library's checks of what `Pipeline.pick` takes (`Pipeline.check_pick`: a budget is a
  whole number >= 1, as a float such as 512.0 is; 0 would select nothing, ever), and the
  adapters' own (`order`, `group_by`, `title_key`)."""
  jaxsel.Pipeline.check_pick(method=method, budget=budget, k=k, granularity=granularity,
                             max_per_group=max_per_group)
  check_order(order)
  check_groups(group_by, max_per_group)
  if title_key is not None and not isinstance(title_key, str):
    raise TypeError(f"`title_key` must be a metadata key (a str) or None (no titles), got "
                    f"{type(title_key).__name__}.")


def titles(metadata: Sequence[Any], title_key: Optional[str]) -> Optional[list]:
  """One title per candidate: its `metadata[title_key]` when that is a non-blank str, else
  None; None without `title_key` or when no candidate has one."""
  if title_key is None:
    return None
  out = [(meta or {}).get(title_key) for meta in metadata]
  out = [t.strip() if isinstance(t, str) and t.strip() else None for t in out]
  return out if any(t is not None for t in out) else None


def check_groups(group_by, max_per_group) -> None:
  """`group_by` (a metadata key) and `max_per_group` (an int >= 1) go together."""
  if (group_by is None) != (max_per_group is None):
    raise ValueError("`group_by` (a metadata key) and `max_per_group` (the most kept per value of "
                     "it) go together: pass both or neither.")
  if group_by is not None and not isinstance(group_by, str):
    raise TypeError(f"`group_by` must be a metadata key (a str), got {type(group_by).__name__}.")


def group_labels(metadata: Sequence[Any], group_by: Optional[str]) -> Optional[list]:
  """One label per candidate: its `metadata[group_by]` (a candidate without the key, or with
  an unhashable value's repr, is in a group of its own when the key is missing); None without
  `group_by`."""
  if group_by is None:
    return None
  labels = []
  for i, meta in enumerate(metadata):
    value = (meta or {}).get(group_by, _Own(i))
    try:
      hash(value)
    except TypeError:
      value = repr(value)
    labels.append(value)
  return labels


class _Own(NamedTuple):
  """The group of a candidate without the `group_by` key: its own."""
  index: int


def resolve_method(method, pipeline) -> str:
  """`method`, else the given pipeline's, else the default for a question (CORAG)."""
  if method is None and isinstance(pipeline, jaxsel.Pipeline):
    method = pipeline.method
  return check_method(DEFAULT_METHOD if method is None else method)


# -- token counting -------------------------------------------------------------------------------
def counter_of(pipeline: jaxsel.Pipeline, tokenizer) -> jaxsel.TokenCounter:
  """What counts an adapter's tokens: `tokenizer` (anything `jaxsel.token_counter` takes, or a
  function of one text returning its count or its tokens, such as LlamaIndex's
  `Settings.tokenizer`), by default the pipeline's reader tokenizer (`Pipeline.tokenizer`:
  the encoder's word pieces unless the pipeline was given one)."""
  if tokenizer is None:
    return pipeline.tokenizer
  return jaxsel.token_counter(tokenizer, per_text=True)


def candidate_costs(pipeline: jaxsel.Pipeline, tokenizer, texts: Sequence[str]) -> np.ndarray:
  """`[N]` token counts of `texts` in `counter_of(pipeline, tokenizer)`."""
  return counter_of(pipeline, tokenizer).count(list(texts))


# -- embeddings -----------------------------------------------------------------------------------
def stack_embeddings(vectors: Sequence[Any], what: str) -> Optional[np.ndarray]:
  """`[N, D]` float32 from one vector per candidate, or None when any candidate has none."""
  if not vectors or any(v is None for v in vectors):
    return None
  rows = []
  for i, v in enumerate(vectors):
    row = np.asarray(v, np.float32)
    if row.ndim != 1 or row.size == 0:
      raise ValueError(f"The embedding of {what} {i} must be a flat vector, got shape {row.shape}.")
    if rows and row.shape != rows[0].shape:
      raise ValueError(f"The {what} embeddings have different sizes ({what} 0: {rows[0].size}, "
                       f"{what} {i}: {row.size}); they must all come from one embedding model.")
    rows.append(row)
  return np.stack(rows)


def as_query_embedding(vector, what: str) -> Optional[np.ndarray]:
  if vector is None:
    return None
  q = np.asarray(vector, np.float32)
  if q.ndim != 1 or q.size == 0:
    raise ValueError(f"The {what} must be a flat vector, got shape {q.shape}.")
  return q


def check_dimensions(pipeline: jaxsel.Pipeline, emb: np.ndarray, query_emb: Optional[np.ndarray],
                     *, what: str, query_hint: str) -> None:
  """Query and candidate embeddings must come from one model: same dimension, and when jaxsel
  embeds the query, the jaxsel encoder's dimension."""
  d = emb.shape[1]
  if query_emb is not None:
    if query_emb.shape[0] != d:
      raise ValueError(f"The query embedding has {query_emb.shape[0]} dimensions but the {what} "
                       f"embeddings have {d}: both must come from the same embedding model.")
    return
  enc_dim = getattr(pipeline.encoder, "dim", None)
  if enc_dim is not None and int(enc_dim) != d:
    name = getattr(pipeline.encoder, "name", None) or type(pipeline.encoder).__name__
    raise ValueError(
        f"The {what}s carry {d}-dimensional embeddings, but the jaxsel encoder ({name}) makes "
        f"{int(enc_dim)}-dimensional ones and would embed the query: relevance compares a query "
        f"with passages only within one model. Use a jaxsel encoder of the model that embedded "
        f"the {what}s, {query_hint}, or set reuse_embeddings=False to embed the {what}s with the "
        "jaxsel encoder.")


# -- the pipeline ---------------------------------------------------------------------------------
def build_pipeline(pipeline=None, encoder=None) -> jaxsel.Pipeline:
  """The given `Pipeline`, or one over `encoder` (an `Encoder`, or a model name or folder for
  `jaxsel.load_encoder`; default all-MiniLM-L6-v2)."""
  if pipeline is not None:
    if encoder is not None:
      raise TypeError("Give `pipeline` or `encoder`, not both (a pipeline has its encoder).")
    if not isinstance(pipeline, jaxsel.Pipeline):
      raise TypeError(f"`pipeline` must be a jaxsel.Pipeline, got {type(pipeline).__name__}.")
    return pipeline
  if encoder is None:
    encoder = DEFAULT_MODEL
  if isinstance(encoder, (str, os.PathLike)):
    encoder = jaxsel.load_encoder(encoder)
  return jaxsel.Pipeline(encoder)


def select_candidates(pipeline: jaxsel.Pipeline, query: str, texts: Sequence[str],
                      costs: np.ndarray, *, embeddings: Optional[np.ndarray],
                      query_embedding: Optional[np.ndarray], method: str, budget, k, min_gain,
                      order: str, what: str, query_hint: str,
                      contents: Optional[Sequence[str]] = None, groups: Optional[list] = None,
                      max_per_group: Optional[int] = None, granularity: str = DEFAULT_GRANULARITY,
                      tokenizer=None, overhead: Optional[np.ndarray] = None,
                      titles: Optional[Sequence[Optional[str]]] = None):
  """Selects among `texts` (costs `[N]`) for `query`: -> (picks in output order, result).

  With `granularity="sentence"` a candidate is kept whole or as runs of its sentences (a
  `Pick` with `text`, `start`, `end` in `texts[index]`): the sentences are embedded by the
  pipeline's encoder (not the candidates' `embeddings`) and counted by `tokenizer` (as
  `candidate_costs`); a part costs its text plus `overhead[index]` (`[N]`, what the framework
  adds to each candidate it sends, e.g. its metadata), and the last picks are dropped while
  the kept ones cost more than the budget. ``"auto"`` is resolved here, as the library
  resolves it (`Pipeline.resolve_granularity`: passages with `embeddings`). With `titles` (one
  title or None per candidate, `titles(...)`), a part that does not hold its candidate's title
  is embedded, counted and sent as ``"title: part"`` (its `Pick.prefix`), as the Pipeline
  sends a part of a titled `Passage`; a whole candidate is sent as it is.

  With `embeddings` `[N, D]` nothing is embedded but (without `query_embedding`) the query.
  A candidate whose `contents` (its own text, default `texts`) is blank is never picked; a
  budget below every other candidate's cost picks nothing and logs a warning (`result` is
  then None), as the module docstring says. `groups` (one label per candidate, `group_labels`)
  with `max_per_group` keeps at most that many per label.
  """
  check_settings(method=method, budget=budget, k=k, order=order, granularity=granularity)
  granularity = jaxsel.Pipeline.resolve_granularity(  # "auto": passages with embeddings
      granularity, budget=budget, costs=costs, embeddings=embeddings is not None)
  if not isinstance(query, str) or not query.strip():
    raise ValueError(f"jaxsel needs a query (a non-empty string) to select {what}s, got {query!r}.")
  keep = [bool(t.strip()) for t in (texts if contents is None else contents)]
  kept = [i for i, ok in enumerate(keep) if ok]
  if not kept:
    return [], None
  cheapest = min(int(costs[i]) for i in kept)
  if budget is not None and budget < cheapest and granularity != "passage":  # or a sentence
    cheapest = min(cheapest, int(min(counter_of(pipeline, tokenizer).count(
        [p.text for i in kept for p in jaxsel.split_text(texts[i], unit="sentence")]))))
  if budget is not None and budget < cheapest:
    logger.warning("jaxsel selects no %s: the budget of %g tokens is below the cheapest of the "
                   "%d candidates (%d tokens).", what, budget, len(kept), cheapest)
    return [], None
  if pipeline.method != method:
    pipeline = pipeline.replace(method=method)  # shares the encoder and the embedding cache
  q_emb = None
  if granularity != "passage":  # sentences are embedded and counted by the pipeline
    embeddings = None
    pipeline = pipeline.replace(tokenizer=counter_of(pipeline, tokenizer))
  if embeddings is not None:
    check_dimensions(pipeline, embeddings, query_embedding, what=what, query_hint=query_hint)
    q_emb = None if query_embedding is None else query_embedding[None]
  docs = list(texts) if titles is None else [t if ti is None else {"text": t, "title": ti}
                                              for t, ti in zip(texts, titles)]
  result = pipeline.pick(query, docs, budget=budget, k=k, min_gain=min_gain,
                         embeddings=embeddings, query_embeddings=q_emb, granularity=granularity,
                         costs=[int(c) for c in costs], keep=keep,
                         groups=groups if max_per_group is not None else None,
                         max_per_group=max_per_group)
  picks = _picks(result.picks, texts, budget, overhead)
  if order == "input":
    picks.sort(key=lambda p: (p.index, p.start or 0))
  return picks, result


def _picks(picks: list, texts: Sequence[str], budget, overhead) -> list:
  """The adapter's `Pick`s of `jaxsel.Pick`s: a part of a candidate (granularity "sentence")
  costs its `overhead` too (what the framework adds to what it sends), and the last picks are
  dropped while the kept ones cost more than `budget`."""
  out, spent = [], 0.0
  for r, q in enumerate(picks):
    part = q.end - q.start != len(texts[q.document])
    spent += q.tokens + (float(overhead[q.document]) if part and overhead is not None else 0.0)
    if budget is not None and spent > budget:
      break
    out.append(Pick(q.document, r, 0.0 if q.relevance is None else q.relevance, q.gain,
                    *((q.text, q.start, q.end, q.prefix) if part else ())))
  return out

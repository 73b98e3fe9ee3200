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
from jaxsel._src import checks, methods, tokens
from jaxsel._src.pipeline.granularity import check_granularity
from jaxsel._src.text import sentence_spans

# The methods that rank candidates for a query (`"coverage"` takes none, so it has no place here).
METHODS = methods.NEEDS_QUERY  # the adapters always have a query
ORDERS = ("input", "selection")
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_METHOD = methods.DEFAULT_QUERY_METHOD  # the adapters always have a query
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

  def metadata(self) -> dict:
    """What an adapter adds to a kept candidate's metadata for a part of it."""
    return {} if self.text is None else {"jaxsel_start": self.start, "jaxsel_end": self.end}


# -- settings -------------------------------------------------------------------------------------
def check_method(method) -> str:
  return checks.choice(method, "method", METHODS, hint=" (the adapters take the methods that "
                       "read a query)")


def check_order(order) -> str:
  return checks.choice(order, "order", ORDERS, hint=" ('input': the candidates' own order; "
                       "'selection': pick order, most valuable first)")


def check_budget(budget):
  """None, or a whole number of tokens >= 1 (a float such as 512.0 is one; 0 would select
  nothing, ever)."""
  return checks.token_budget(budget, low=1, whole=True, none="only `k` limits")


def check_k(k):
  return checks.integer(k, "k", none=True)


def check_settings(*, method, budget, k, order, group_by=None, max_per_group=None,
                   granularity="passage") -> None:
  check_method(method)
  check_granularity(granularity)
  check_budget(budget)
  check_k(k)
  check_order(order)
  check_groups(group_by, max_per_group)


def check_groups(group_by, max_per_group) -> None:
  """`group_by` (a metadata key) and `max_per_group` (an int >= 1) go together."""
  if (group_by is None) != (max_per_group is None):
    raise ValueError("`group_by` (a metadata key) and `max_per_group` (the most kept per value of "
                     "it) go together: pass both or neither.")
  if group_by is not None and not isinstance(group_by, str):
    raise TypeError(f"`group_by` must be a metadata key (a str), got {type(group_by).__name__}.")
  checks.integer(max_per_group, "max_per_group", none=True)


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
  if (callable(tokenizer) and not isinstance(tokenizer, jaxsel.TokenCounter)
      and not tokens.is_hf_tokenizer(tokenizer)):
    return tokens.text_counter(tokenizer)
  return jaxsel.token_counter(tokenizer)


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
                      max_per_group: Optional[int] = None, granularity: str = "passage",
                      tokenizer=None, overhead: Optional[np.ndarray] = None):
  """Selects among `texts` (costs `[N]`) for `query`: -> (picks in output order, result).

  With `granularity="sentence"` a candidate is kept whole or as runs of its sentences (a
  `Pick` with `text`, `start`, `end` in `texts[index]`): the sentences are embedded by the
  pipeline's encoder (not the candidates' `embeddings`) and counted by `tokenizer` (as
  `candidate_costs`); a part costs its text plus `overhead[index]` (`[N]`, what the framework
  adds to each candidate it sends, e.g. its metadata), and the last picks are dropped while
  the kept ones cost more than the budget.

  With `embeddings` `[N, D]` nothing is embedded but (without `query_embedding`) the query.
  A candidate whose `contents` (its own text, default `texts`) is blank is never picked; a
  budget below every other candidate's cost picks nothing and logs a warning (`result` is
  then None), as the module docstring says. `groups` (one label per candidate, `group_labels`)
  with `max_per_group` keeps at most that many per label.
  """
  check_settings(method=method, budget=budget, k=k, order=order, granularity=granularity)
  if not isinstance(query, str) or not query.strip():
    raise ValueError(f"jaxsel needs a query (a non-empty string) to select {what}s, got {query!r}.")
  keep = [i for i, t in enumerate(texts if contents is None else contents) if t.strip()]
  if not keep:
    return [], None
  cheapest = min(int(costs[i]) for i in keep)
  if budget is not None and budget < cheapest and granularity == "sentence":  # or a sentence
    cheapest = min(cheapest, int(min(counter_of(pipeline, tokenizer).count(
        [texts[i][a:b] for i in keep for a, b in sentence_spans(texts[i])]))))
  if budget is not None and budget < cheapest:
    logger.warning("jaxsel selects no %s: the budget of %g tokens is below the cheapest of the "
                   "%d candidates (%d tokens).", what, budget, len(keep), cheapest)
    return [], None
  if pipeline.method != method:
    pipeline = pipeline.replace(method=method)  # shares the encoder and the embedding cache
  passages = [jaxsel.Passage(texts[i], 0, len(texts[i]), doc=j, tokens=int(costs[i]))
              for j, i in enumerate(keep)]
  q_emb = None
  if granularity == "sentence":  # sentences are embedded and counted by the pipeline
    embeddings = None
    pipeline = pipeline.replace(tokenizer=counter_of(pipeline, tokenizer))
  if embeddings is not None:
    check_dimensions(pipeline, embeddings, query_embedding, what=what, query_hint=query_hint)
    embeddings = embeddings[keep]
    q_emb = None if query_embedding is None else query_embedding[None]
  caps = {}
  if max_per_group is not None:
    caps = {"groups": [groups[i] for i in keep], "max_per_group": max_per_group}
  result = pipeline.select(query, passages, budget=budget, k=k, min_gain=min_gain,
                           embeddings=embeddings, query_embeddings=q_emb, granularity=granularity,
                           **caps)
  scores = np.zeros(len(result.indices)) if result.scores is None else result.scores
  if granularity == "sentence":
    picks = _parts(result, passages, keep, scores, budget, overhead)
  else:
    picks = [Pick(keep[int(i)], r, float(s), float(g))
             for r, (i, s, g) in enumerate(zip(result.indices, scores, result.gains))]
  if order == "input":
    picks.sort(key=lambda p: (p.index, p.start or 0))
  return picks, result


def _parts(result, passages: list, keep: list, scores, budget, overhead) -> list:
  """The picks of a sentence-granularity `result`: each unit a whole candidate or a part of
  it, the last dropped while the parts' `overhead` takes the total over `budget`."""
  picks, spent = [], 0.0
  for r, (u, s, g) in enumerate(zip(result.passages, scores, result.gains)):
    whole = passages[u.doc]
    i = keep[u.doc]
    part = not (u.start == whole.start and u.end == whole.end)
    spent += u.tokens + (float(overhead[i]) if part and overhead is not None else 0.0)
    if budget is not None and spent > budget:
      break
    picks.append(Pick(i, r, float(s), float(g), *((u.text, u.start, u.end) if part else ())))
  return picks


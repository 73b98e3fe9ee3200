"""From what a caller passes to a request: queries, candidate passages and their embeddings.

Shape legend: Q queries, N candidate passages, D embedding dimension.

Candidates come from documents (split into `Passage`s, embedded whole or pooled from their
documents' tokens), from `Passage`s or texts given as they are, with or without embeddings
the caller already has, or from a `VectorIndex` (retrieved by the queries). Every argument is
checked here, before anything is embedded or compiled; the budget leaves in its one form, a
float with `inf` for no budget.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import NamedTuple, Optional

import numpy as np

from jaxsel._src import checks, methods
from jaxsel._src.constraints import UNCAPPED
from jaxsel._src import text as text_lib
from jaxsel._src.index import VectorIndex
from jaxsel._src.pipeline.embedding import Embedder

NO_BUDGET = math.inf


class Candidates(NamedTuple):
  """One request's candidates."""
  passages: list  # [N] `Passage`s
  embeddings: np.ndarray  # [N, D] asymmetric passage embeddings (relevance)
  symmetric: np.ndarray  # [N, D] symmetric embeddings (similarity)
  documents: Optional[list]  # the documents the passages were split from, else None
  sent: Optional[np.ndarray] = None  # [N] costs as sent (`reader.candidate_costs`), or None
  # granularity="sentence" (`granularity.sentences`): each candidate's passage [N] int32, and
  # the [M] passages; None at "passage".
  parents: Optional[np.ndarray] = None
  units: Optional[list] = None
  # granularity="sentence": the [M] passages' own (embeddings, symmetric) `[M, D]` where the
  # source had them (an index's), so the passage guide (`guide.py`) need not embed them again.
  units_embedded: Optional[tuple] = None

  @property
  def costs(self) -> np.ndarray:
    """`[N]` float32 token costs: as sent in the context (`sent`) for the candidates the
    pipeline counts itself, else the `tokens` of the caller's `Passage`s."""
    if self.sent is not None:
      return self.sent
    return np.asarray([p.tokens for p in self.passages], np.float32)


def as_queries(queries) -> list:
  """`queries` (a str, a list of str, or None) as a checked list."""
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


def check_queries(method: str, queries: list) -> None:
  """Whether `method` takes these queries (checked before any embedding)."""
  if method in methods.NEEDS_QUERY and not queries:
    raise ValueError(f"method {method!r} ranks passages for a query; pass `queries`, or "
                     "use method='coverage' for text selection without a query.")
  if method == "coverage" and queries:
    raise ValueError("method 'coverage' is text selection: it covers the documents and takes no "
                     "query (it would be ignored). Pass `queries=None`, or use "
                     "method='facility_location' or 'saturated_coverage' to select for the queries.")


def check_budget(budget, k, costs: np.ndarray) -> float:
  """The request's budget as a float (`NO_BUDGET`, inf, for None), checked against the
  cheapest of `costs` `[N]`; `k` checked too."""
  if k is not None:
    checks.integer(k, "k", none=True)
  if budget is None:
    return NO_BUDGET
  checks.token_budget(budget)
  cheapest = int(np.min(costs)) if len(costs) else 0
  if budget < cheapest:
    raise ValueError(f"`budget` {budget:g} is below the smallest passage ({cheapest} tokens); "
                     "raise the budget or split into smaller passages (`max_tokens`).")
  return float(budget)


def from_documents(source, split) -> Candidates:
  """Candidates, not yet embedded (`embedded`), from documents (split with
  `split(documents) -> [Passage]`) or `Passage`s."""
  if isinstance(source, str):
    raise TypeError("`documents_or_index` must be a list of documents, not one string; "
                    "wrap it: [document].")
  source = list(source)
  if not source:
    raise ValueError("`documents_or_index` is empty: give at least one document.")
  if all(isinstance(p, text_lib.Passage) for p in source):
    passages, docs = source, None
  else:
    passages, docs = split(source), source
  if not passages:
    raise ValueError("The documents contain no text (only whitespace).")
  return Candidates(passages, None, None, docs)


def expanded(cands: Candidates, expand) -> Candidates:
  """`cands` cut finer by `expand(passages) -> (candidates, parents, passages)`
  (`granularity.sentences`), not yet embedded; the passages keep the embeddings they had."""
  passages, parents, units = expand(cands.passages)
  whole = None if cands.embeddings is None else (cands.embeddings, cands.symmetric)
  return Candidates(passages, None, None, cands.documents, None, parents, units, whole)


def embedded(cands: Candidates, embedder: Embedder, *, late_chunking: bool) -> Candidates:
  """`cands` with their embeddings: as they are where they have them, else pooled from their
  documents' tokens (`late_chunking`, for split documents) or each embedded alone."""
  if cands.embeddings is not None:
    return cands
  if late_chunking and cands.documents is not None:
    e = embedder.late_chunks(cands.documents, cands.passages)
    return cands._replace(embeddings=e, symmetric=e)
  e, s = embedder.passages([p.sent_text for p in cands.passages])
  return cands._replace(embeddings=e, symmetric=s)


def from_embeddings(source, embeddings, tokenizer) -> Candidates:
  """Candidates the caller has already embedded (a framework's nodes): `Passage`s or texts
  (one passage each, costed with `tokenizer`) and their `[N, D]` embeddings, used for
  relevance and similarity alike."""
  if isinstance(source, (str, VectorIndex)) or source is None:
    raise TypeError("`embeddings` go with a list of passages (`Passage`s or strings), one row each.")
  source = list(source)
  if not source:
    raise ValueError("`documents_or_index` is empty: give at least one passage.")
  if all(isinstance(p, text_lib.Passage) for p in source):
    passages = source
  else:
    texts = checks.check_texts(source, "documents_or_index")
    costs = text_lib.token_costs(texts, tokenizer)
    passages = [text_lib.Passage(t, 0, len(t), doc=i, tokens=int(c))
                for i, (t, c) in enumerate(zip(texts, costs))]
  e = checks.as_host_float32(embeddings, "embeddings")
  if e.ndim != 2 or e.shape[0] != len(passages):
    raise ValueError(f"`embeddings` must be [N, D] with one row per passage (N = {len(passages)}), "
                     f"got shape {tuple(e.shape)}.")
  return Candidates(passages, e, e, None)


def from_index(index: VectorIndex, queries: list, embedder: Embedder, tokenizer, *,
               candidates: int) -> Candidates:
  """The passages of `index` retrieved for `queries` (up to `candidates` per query), or the
  whole index for text selection when it is small, each costing its text in `tokenizer` (the
  index may have counted in another unit)."""
  if not len(index):
    raise ValueError("The index is empty; add passages first (`Pipeline.build_index`).")
  if queries:
    hits = index.search(embedder.embed(queries, "query"), k=min(candidates, len(index)))
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
  tokens = tokenizer.count([p.text for p in passages])
  passages = [dataclasses.replace(p, tokens=int(n)) for p, n in zip(passages, tokens)]
  e = np.asarray(index.embeddings)[np.asarray(ids)]
  return Candidates(passages, e, e, None)


def query_embeddings(queries: list, given, dim: int, embedder: Embedder) -> Optional[np.ndarray]:
  """`[Q, D]` embeddings of `queries`: `given` (checked) or the embedder's; None without queries."""
  if given is None:
    return embedder.embed(queries, "query") if queries else None
  q = checks.as_host_float32(given, "query_embeddings")
  if q.ndim == 1:
    q = q[None]
  if q.shape != (len(queries), dim):
    raise ValueError(f"`query_embeddings` must be [Q, D] = [{len(queries)}, {dim}] (one row per "
                     f"query, the passages' dimension), got shape {tuple(q.shape)}.")
  return q


def repeats(passages: list, constraints: Optional[tuple] = None) -> Optional[np.ndarray]:
  """`[N]` bool: the candidates whose text as sent (`Passage.sent_text`) a pinned or an
  earlier candidate already has (the same chunk from two retrievers, a document given twice),
  or None when there are none. A pinned candidate is never a repeat. CORAG searches and tops
  up each text once: a second copy tells the reader nothing."""
  pinned = [] if constraints is None else [int(i) for i in constraints[0]]
  first = {}
  for i in [*pinned, *range(len(passages))]:
    first.setdefault(passages[i].sent_text, i)
  keep = set(pinned)
  out = np.asarray([first[p.sent_text] != i and i not in keep for i, p in enumerate(passages)],
                   bool)
  return out if out.any() else None


def constraints(cands: Candidates, pinned, groups, max_per_group, *, budget: float, k,
                index: bool = False, name: str = "") -> Optional[tuple]:
  """A request's constraints as `(pinned [P], cap_groups [N], cap)` (`solve.pad_batch`), or
  None. Indices and labels refer to `documents_or_index` as the caller gave it: for documents
  the Pipeline splits, `pinned` names documents (every passage of each, in order) and
  `groups` gives one label per document; for `Passage`s (or texts with embeddings) they name
  candidates. Labels are any hashable values; `max_per_group` alone groups the passages by
  their `doc`. Checked here (the solve is traced): ValueError naming the argument."""
  if pinned is None and groups is None and max_per_group is None:
    return None
  passages = cands.passages
  split = cands.documents is not None
  # Sentences of the caller's passages: indices and labels name those passages.
  parent = (cands.parents if cands.parents is not None and not split
            else np.arange(len(passages)))
  size = len(cands.documents) if split else len(cands.units or passages)
  what = "documents" if split else "candidates"
  if groups is not None and max_per_group is None:
    raise ValueError(f"`{name}groups` needs `max_per_group` (the most picks per group).")
  if isinstance(max_per_group, (int, np.integer)) and not isinstance(max_per_group, bool) \
      and max_per_group == 0:
    # One rule with `jaxsel serve`: a cap of 0 would keep nothing (or only what is pinned).
    raise ValueError("`max_per_group`=0 keeps no passage of any group: give at least 1, or leave "
                     "`max_per_group` (and `groups`) out for no cap.")
  cap = checks.integer(max_per_group, "max_per_group", low=1, none=True)
  pin = []
  if pinned is not None:
    if index:
      raise ValueError(f"`{name}pinned` needs documents or passages: candidates retrieved from an "
                       "index have no fixed indices.")
    if isinstance(pinned, (str, bytes)) or not hasattr(pinned, "__iter__"):
      raise TypeError(f"`{name}pinned` must be a list of indices into the {what}, got {pinned!r}.")
    items = list(pinned)
    for x in items:
      if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < size:
        raise ValueError(f"`{name}pinned` holds {x!r}: each must be an index into the {size} {what}.")
    if len(set(items)) != len(items):
      raise ValueError(f"`{name}pinned` repeats an index: {items}.")
    pin = ([i for d in items for i, p in enumerate(passages) if p.doc == d] if split else
           [i for x in items for i in np.flatnonzero(parent == x)])
  labels = [p.doc for p in passages]
  if groups is not None:
    if index:
      raise ValueError(f"`{name}groups` needs documents or passages (an index's passages are grouped "
                       "by their `doc` with `max_per_group` alone).")
    if isinstance(groups, (str, bytes)) or not hasattr(groups, "__len__") or len(groups) != size:
      raise ValueError(f"`{name}groups` must hold one label per item of the {size} {what}, got "
                       f"{len(groups) if hasattr(groups, '__len__') else type(groups).__name__}.")
    groups = list(groups)
    labels = [groups[p.doc] for p in passages] if split else [groups[m] for m in parent]
  ids = {}
  try:
    cap_groups = np.asarray([ids.setdefault(x, len(ids)) for x in labels], np.int32)
  except TypeError:
    raise TypeError(f"`{name}groups` labels must be hashable (e.g. str or int).") from None
  if cap is None:
    cap_groups[:] = -1
  pin = np.asarray(pin, np.int32)
  # At sentence granularity `k` and the caps count the passages the sentences come from.
  unit = cands.parents if cands.parents is not None else np.arange(len(passages))
  pinned_units = len(set(unit[pin].tolist()))
  if k is not None and pinned_units > k:
    raise ValueError(f"`{name}pinned` holds {pinned_units} passages, more than `k`={k} allows.")
  spent = float(cands.costs[pin].sum()) if len(pin) else 0.0
  if spent > budget:
    raise ValueError(f"`{name}pinned` passages alone cost {spent:g} tokens, over the budget {budget:g}.")
  if cap is not None and len(pin):
    full = max(collections.Counter(g for g, _ in set(zip(cap_groups[pin].tolist(),
                                                           unit[pin].tolist()))).values())
    if full > cap:
      raise ValueError(f"`{name}pinned` alone breaks `max_per_group`={cap}: {full} pinned passages "
                       "share a group.")
  return pin, cap_groups, UNCAPPED if cap is None else cap


def build_index(pipe, documents, *, sources, index: Optional[VectorIndex],
                info: Optional[dict]) -> VectorIndex:
  """`Pipeline.build_index`: `documents` split and embedded by `pipe` into `index`."""
  passages = pipe.split(documents, sources=sources)
  if not passages:
    raise ValueError("`documents` contain no text to index.")
  if pipe.late_chunking:
    emb = pipe.embedder.late_chunks(checks.check_texts(documents, "documents"), passages)
  else:
    emb = pipe.embed([p.text for p in passages], "passage")
  cfg = pipe.config
  if index is None:
    index = VectorIndex(emb.shape[1], info={"unit": cfg.unit, "max_tokens": cfg.max_tokens,
                                            **(info or {})})
  meta = [{k: v for k, v in p.to_dict().items() if k != "text"} for p in passages]
  index.add(emb, texts=[p.text for p in passages], metadata=meta)
  return index

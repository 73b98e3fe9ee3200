"""Documents in, picks that name them out: what `jaxsel serve`, the framework adapters and the
`jaxsel` command call (`Pipeline.pick`, `Pipeline.pick_many`).

Shape legend: N documents, D embedding dimension.

An application holds documents as they came (strings, or records with a ``"text"`` and an
optional ``"title"``), each one candidate: not split, costing its own tokens (`costs`, else
the pipeline's tokenizer's count of its text). The rules every application shares are
checked here, once, with one vocabulary of errors (the arguments' names):

* a blank document (empty or whitespace) is never picked: it costs nothing and says nothing
  (`keep` says per document which may be picked; a reranker ranks every one). A pinned
  document that may not be picked, or a request with none that may, is refused;
* `pinned`, `groups`, `costs`, `keep` and `embeddings` hold one entry per document as given
  (blank ones included); the constraints are then the Pipeline's (`candidates.constraints`);
* the result's `picks` name the documents (`Pick.document`, and the span sent); its
  `indices` and `candidates` are the documents kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import numpy as np

from jaxsel._src import checks, methods
from jaxsel._src.pipeline.granularity import check_granularity
from jaxsel._src.pipeline.request import Request
from jaxsel._src.text import Passage
from jaxsel.defaults import DEFAULT_GRANULARITY


def check_settings(*, method=None, budget=None, k=None, granularity: str = DEFAULT_GRANULARITY,
                   max_per_group=None, query: bool = True) -> None:
  """`Pipeline.check_pick`: `pick`'s settings, checked before any document is seen. A budget
  of whole documents' tokens is a whole number >= 1 (0 would select nothing, ever); `method`
  one that reads a query when there is one (`query`)."""
  if method is not None:
    options = methods.NEEDS_QUERY if query else methods.METHODS
    checks.choice(method, "method", options,
                  hint=" (the methods that read a query)" if query else "")
  checks.token_budget(budget, low=1, whole=True, none="only `k` limits")
  checks.integer(k, "k", none=True)
  checks.integer(max_per_group, "max_per_group", none=True)
  check_granularity(granularity)


def _texts(documents, name: str) -> tuple:
  """(texts, titles) of `documents` (strings or records with a "text" and an optional
  "title")."""
  if isinstance(documents, (str, bytes)) or not hasattr(documents, "__iter__"):
    raise TypeError(f"`{name}documents` must be a list of documents (strings or records with "
                    f"a 'text'), got {type(documents).__name__}.")
  texts, titles = [], []
  for i, d in enumerate(documents):
    title = None
    if isinstance(d, Mapping):
      title = d.get("title")
      d = d.get("text")
      if title is not None and not isinstance(title, str):
        raise TypeError(f"`{name}documents[{i}]['title']` must be a str or absent, got "
                        f"{type(title).__name__}.")
    if not isinstance(d, str):
      raise TypeError(f"`{name}documents[{i}]` must be a str or a record with a 'text' str, got "
                      f"{type(d).__name__}.")
    checks.check_unicode(d, f"{name}documents[{i}]")
    texts.append(d)
    titles.append(title)
  if not texts:
    raise ValueError(f"`{name}documents` is empty: give at least one document.")
  return texts, titles


def _per_document(values, n: int, what: str) -> Optional[list]:
  if values is None:
    return None
  if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) != n:
    got = len(values) if hasattr(values, "__len__") else type(values).__name__
    raise ValueError(f"`{what}` must hold one entry per document ({n}), got {got}.")
  return list(values)


def _pinned(pinned, n: int, keep: list, name: str) -> Optional[list]:
  """`pinned` (document indices) checked against the `n` documents and `keep`."""
  if pinned is None:
    return None
  if isinstance(pinned, (str, bytes)) or not hasattr(pinned, "__iter__"):
    raise TypeError(f"`{name}pinned` must be a list of document indices, got {pinned!r}.")
  pinned = list(pinned)
  for j, i in enumerate(pinned):
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n:
      raise ValueError(f"`{name}pinned[{j}]` = {i!r} is not a document index (0 to {n - 1}).")
    if not keep[i]:
      raise ValueError(f"`{name}pinned[{j}]` = {i} is an empty document: a selection never "
                       "keeps one.")
  if len(set(pinned)) != len(pinned):
    raise ValueError(f"`{name}pinned` names a document twice: {pinned}.")
  return [int(i) for i in pinned]


def request(counter, queries: list, documents, *, where: Optional[int] = None, budget=None,
            k=None, granularity: str = DEFAULT_GRANULARITY, pinned=None, groups=None,
            max_per_group=None, embeddings=None, query_embeddings=None, costs=None,
            keep=None) -> Request:
  """The `Request` of `documents` (see the module docstring): the documents that may be picked
  as `Passage`s (`doc`: their index as given), costed by `costs` or `counter`."""
  name = "" if where is None else f"requests[{where}]."
  check_settings(budget=budget, k=k, granularity=granularity, max_per_group=max_per_group)
  texts, titles = _texts(documents, name)
  n = len(texts)
  keep = _per_document(keep, n, f"{name}keep")
  keep = [bool(t.strip()) for t in texts] if keep is None else [bool(x) for x in keep]
  kept = [i for i in range(n) if keep[i]]
  if not kept:
    raise ValueError(f"`{name}documents` are all empty or whitespace (or none may be picked): "
                     "nothing to select.")
  costs = _per_document(costs, n, f"{name}costs")
  if costs is None:
    tokens = counter.count([texts[i] for i in kept]).tolist()
  else:
    tokens = []
    for i in kept:
      c = costs[i]
      if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0:
        raise ValueError(f"`{name}costs[{i}]` must be a whole number of tokens >= 0, got {c!r}.")
      tokens.append(int(c))
  pinned = _pinned(pinned, n, keep, name)
  at = {d: m for m, d in enumerate(kept)}
  groups = _per_document(groups, n, f"{name}groups")
  if embeddings is not None:
    e = checks.as_host_float32(embeddings, f"{name}embeddings")
    if e.ndim != 2 or e.shape[0] != n:
      raise ValueError(f"`{name}embeddings` must be [N, D] with one row per document (N = {n}), "
                       f"got shape {tuple(e.shape)}.")
    embeddings = e[np.asarray(kept)]
  passages = [Passage(texts[i], 0, len(texts[i]), doc=i, tokens=t, title=titles[i])
              for i, t in zip(kept, tokens)]
  return Request(queries, passages, budget, k, granularity,
                 None if pinned is None else [at[i] for i in pinned],
                 None if groups is None else [groups[i] for i in kept], max_per_group,
                 embeddings, query_embeddings, where=where)

"""Approximate top-m cosine graphs through faiss (the optional ``ann`` extra:
``pip install 'jaxsel[ann]'``), for N where the exact `O(N²·D)` build takes too long.

Shape legend: n items, D embedding dimension, m neighbours kept per item.

Each item queries an index of all items for its m nearest by inner product (the embeddings
are unit rows, so this is cosine). ``"ivf"``: spherical k-means cells (`nlist`), each item
compared with the members of its `nprobe` nearest cells. ``"hnsw"``: a hierarchical
navigable small-world graph (`M` links per item), searched with a beam of `ef_search`.
The similarities returned are the index's own float32 inner products of the pairs found.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np
from tqdm.auto import tqdm

from jaxsel._src.objectives.knn_exact import transform, unit_rows

_CHUNKS = 32  # progress steps per phase


def _ivf_defaults(n: int) -> dict:
  # Cells of ~sqrt(N)/2 items: the k-means training and the assignment (O(N·nlist·D), BLAS)
  # balance the scan of nprobe cells per item (O(N·nprobe·N/nlist·D)).
  nlist = max(1, min(round(2 * math.sqrt(n)), n // 40))
  return dict(nlist=nlist, nprobe=min(nlist, 16), train_size=min(n, 40 * nlist), train_iters=10)


def _hnsw_defaults(n: int) -> dict:
  return dict(M=16, ef_construction=40, ef_search=64)


DEFAULTS = {"ivf": _ivf_defaults, "hnsw": _hnsw_defaults}


def _faiss():
  try:
    import faiss
  except ImportError:
    raise ImportError("An approximate kNN graph needs faiss: `pip install 'jaxsel[ann]'` (or "
                      "`pip install faiss-cpu`); `method='exact'` needs nothing more.") from None
  return faiss


def settings(method: str, options: Optional[Mapping[str, Any]], n: int) -> dict:
  """The index settings: `DEFAULTS[method](n)` updated by `options` (checked, before any work)."""
  _faiss()
  out = DEFAULTS[method](max(n, 1))
  if options is None:
    return out
  if not isinstance(options, Mapping):
    raise TypeError(f"`options` must be a mapping of {method!r} settings, got "
                    f"{type(options).__name__}.")
  unknown = set(options) - set(out)
  if unknown:
    raise ValueError(f"Unknown `options` {sorted(unknown)} for method {method!r}; its settings "
                     f"are {sorted(out)}.")
  for key, value in options.items():
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
      raise ValueError(f"`options[{key!r}]` must be a positive int, got {value!r}.")
    out[key] = int(value)
  if method == "ivf":
    out["nlist"] = min(out["nlist"], max(n, 1))
    out["nprobe"] = min(out["nprobe"], out["nlist"])
    out["train_size"] = min(max(out["train_size"], out["nlist"]), max(n, 1))
  return out


def approximate_top_m(e: np.ndarray, rows: np.ndarray, m: int, nonneg: str, *, method: str,
                      settings: dict, progress: bool):
  """Approximate top-`m` neighbours of each of the rows `rows` `[n]` of `e` `[N, D]` among
  those rows, by cosine similarity.

  Returns:
    `(index [n, m] int64, value [n, m])` as `knn_exact.exact_top_m`: positions in `rows`,
    value descending, ties to the lowest index; -1 / -inf where the index found fewer than m.
  """
  faiss = _faiss()
  n, d = len(rows), e.shape[1]
  index_ = np.full((n, m), -1, np.int64)
  value = np.full((n, m), -np.inf, np.float32)
  if n == 0:
    return index_, value
  e = unit_rows(e, rows)
  chunk = max(1, -(-n // _CHUNKS))
  with tqdm(total=2 * n, desc=f"{method} kNN graph", unit="item", disable=not progress) as bar:
    if method == "ivf":
      quantizer = faiss.IndexFlatIP(d)
      index = faiss.IndexIVFFlat(quantizer, d, settings["nlist"], faiss.METRIC_INNER_PRODUCT)
      rng = np.random.default_rng(0)
      index.cp.niter = settings["train_iters"]
      index.train(e[np.sort(rng.choice(n, settings["train_size"], replace=False))])
      index.nprobe = settings["nprobe"]
    else:
      index = faiss.IndexHNSWFlat(d, settings["M"], faiss.METRIC_INNER_PRODUCT)
      index.hnsw.efConstruction = settings["ef_construction"]
      index.hnsw.efSearch = max(settings["ef_search"], m)
    for a in range(0, n, chunk):
      index.add(e[a:a + chunk])
      bar.update(min(chunk, n - a))
    k = min(m, n)
    for a in range(0, n, chunk):
      dist, ids = index.search(e[a:a + chunk], k)
      index_[a:a + chunk, :k] = ids
      value[a:a + chunk, :k] = dist
      bar.update(min(chunk, n - a))
  found = index_ >= 0
  value = np.where(found, transform(np.where(found, value, 0), nonneg), -np.inf)
  # The index orders by raw inner product and breaks ties its own way: re-rank by the
  # non-negative value, ties to the lowest index, as the exact graph does.
  order = np.lexsort((np.where(found, index_, n), -value), axis=-1)
  return np.take_along_axis(index_, order, 1), np.take_along_axis(value, order, 1)

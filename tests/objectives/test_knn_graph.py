"""kNN graphs: the exact host build and the device build against a brute-force NumPy top-m
(ties included), the approximate (faiss) graphs' recall, progress bars, and bad input."""

from __future__ import annotations

import sys

import jax
import numpy as np
import pytest

import jaxsel
from jaxsel._src.objectives import ann, knn_exact

NONNEG = {"clip": lambda s: np.maximum(s, 0), "shift": lambda s: (s + 1) / 2,
          "square": lambda s: s * s}


def brute_top_m(emb, m, valid=None, nonneg="clip"):
  """Row j: the valid items by (non-negative similarity desc, index asc), m of them; -1 and
  0 beyond the valid items and on invalid rows."""
  e = np.asarray(emb, np.float32)
  e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), np.float32(1e-12))
  n = len(e)
  valid = np.ones(n, bool) if valid is None else np.asarray(valid)
  sim = NONNEG[nonneg](e @ e.T)
  nb, s = np.full((n, m), -1, np.int64), np.zeros((n, m), np.float32)
  items = np.flatnonzero(valid)
  for j in np.flatnonzero(valid):
    order = items[np.lexsort((items, -sim[j, items]))][:m]
    nb[j, :len(order)], s[j, :len(order)] = order, sim[j, order]
  return nb, s


def tied_embeddings(n, seed=0):
  """Unit rows whose dot products are exact in float32 whatever the summation order: sixteen
  entries of ±1/4, or four of ±1/2. Many pairs tie, and duplicate rows tie exactly."""
  rng = np.random.default_rng(seed)
  e = rng.choice([-0.25, 0.25], size=(n, 16)).astype(np.float32)
  half = rng.uniform(size=n) < 0.3
  for i in np.flatnonzero(half):
    e[i] = 0
    e[i, rng.choice(16, 4, replace=False)] = rng.choice([-0.5, 0.5], 4)
  e[n // 3::7] = e[n // 5]  # duplicates of one row
  return e


def clustered(n, d=32, clusters=20, seed=0):
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(clusters, d)).astype(np.float32)
  return centers[rng.integers(0, clusters, n)] + 0.5 * rng.normal(size=(n, d)).astype(np.float32)


def _assert_graph(g, nb, s):
  np.testing.assert_array_equal(np.asarray(g.neighbors), nb)
  np.testing.assert_array_equal(np.asarray(g.similarities), s)
  assert g.neighbors.dtype == np.int32


@pytest.mark.parametrize("nonneg", ["clip", "shift", "square"])
@pytest.mark.parametrize("n, m, block", [(1, 1, 2048), (7, 3, 2), (40, 7, 8), (300, 12, 64),
                                         (300, 40, 16), (90, 90, 32)])
def test_exact_graph_equals_brute_force_with_ties(nonneg, n, m, block):
  """Host build (tiles smaller and larger than m, several tiles, m = N) and device build (under
  `jit`) give exactly the brute-force top-m, on data where many similarities tie."""
  emb = tied_embeddings(n, seed=n)
  valid = np.random.default_rng(n).uniform(size=n) > 0.2
  valid[0] = True
  for v in (None, valid):
    want = brute_top_m(emb, m, v, nonneg)
    _assert_graph(jaxsel.knn_graph(emb, m=m, valid=v, nonneg=nonneg, block=block), *want)
    device = jax.jit(lambda e, v: jaxsel.knn_graph(e, m=m, valid=v, nonneg=nonneg, block=block))
    _assert_graph(device(emb, np.ones(n, bool) if v is None else v), *want)


def test_exact_graph_on_random_data_and_without_locality_order():
  """Continuous data, several tiles: the top-m values and the similarity of every listed
  neighbour agree with brute force; the locality ordering changes nothing."""
  emb = clustered(700, d=24, seed=3)
  m = 9
  want_nb, want_s = brute_top_m(emb, m)
  g = jaxsel.knn_graph(emb, m=m, block=64)
  np.testing.assert_allclose(g.similarities, want_s, rtol=1e-5, atol=1e-6)
  e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
  listed = np.maximum(np.einsum("nd,nmd->nm", e, e[np.asarray(g.neighbors)]), 0)
  np.testing.assert_allclose(listed, g.similarities, rtol=1e-5, atol=1e-6)
  assert (np.asarray(g.neighbors) == want_nb).mean() > 0.99  # near-ties may swap
  unordered = knn_exact.exact_top_m(emb, np.arange(700), m, "clip", tile=64, progress=False,
                                    order=False)
  np.testing.assert_array_equal(unordered[0], np.asarray(g.neighbors))


def test_fewer_valid_items_than_m():
  emb = tied_embeddings(10)
  valid = np.zeros(10, bool)
  valid[[2, 5, 7]] = True
  g = jaxsel.knn_graph(emb, m=5, valid=valid)
  _assert_graph(g, *brute_top_m(emb, 5, valid))
  nb = np.asarray(g.neighbors)
  assert (nb[~valid] == -1).all() and (nb[valid, 3:] == -1).all()
  none = jaxsel.knn_graph(emb, m=2, valid=np.zeros(10, bool))
  assert (np.asarray(none.neighbors) == -1).all() and not np.asarray(none.similarities).any()
  empty = jaxsel.knn_graph(np.zeros((0, 4), np.float32), m=1)
  assert empty.neighbors.shape == (0, 1)
  # The objectives read -1 as "no neighbour".
  obj = jaxsel.knn_facility_location(g, valid=valid)
  sel = jaxsel.greedy(obj, k=3)
  assert sorted(np.asarray(sel.indices).tolist()) == [2, 5, 7]


@pytest.mark.parametrize("method", ["ivf", "hnsw"])
def test_approximate_graph_recall_and_layout(method):
  """On clustered data the faiss graphs find nearly all exact neighbours; rows are sorted like
  the exact graph's, ids are valid items, and the objective built on them runs."""
  emb = clustered(3000, d=32, clusters=30, seed=1)
  valid = np.random.default_rng(0).uniform(size=3000) > 0.1
  m = 10
  exact = jaxsel.knn_graph(emb, m=m, valid=valid)
  g = jaxsel.knn_graph(emb, m=m, valid=valid, method=method)
  a, b = np.asarray(g.neighbors), np.asarray(exact.neighbors)
  recall = np.mean([len(np.intersect1d(a[j], b[j])) / m for j in np.flatnonzero(valid)])
  assert recall >= 0.95, recall
  assert (a[~valid] == -1).all() and valid[a[valid]].all()
  s = np.asarray(g.similarities)
  assert (np.diff(s, axis=1) <= 0).all()
  e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
  listed = np.maximum(np.einsum("nd,nmd->nm", e[valid], e[a[valid]]), 0)
  np.testing.assert_allclose(listed, s[valid], rtol=1e-4, atol=1e-5)
  sel = jaxsel.greedy(jaxsel.knn_facility_location(g, valid=valid), k=5)
  assert valid[np.asarray(sel.indices)].all()


def test_approximate_graph_ties_to_lowest_index():
  """The index's own order is re-ranked: equal similarities list the lowest id first."""
  emb = tied_embeddings(200, seed=4)
  for method in ("ivf", "hnsw"):
    every_cell = {"nprobe": 1000} if method == "ivf" else None
    g = jaxsel.knn_graph(emb, m=8, method=method, options=every_cell)
    nb, s = np.asarray(g.neighbors), np.asarray(g.similarities)
    same = (s[:, 1:] == s[:, :-1]) & (nb[:, 1:] >= 0)
    assert (nb[:, 1:][same] > nb[:, :-1][same]).all()
    if method == "ivf":  # every cell searched: the exact top-m values (which of the items
      # tied at the m-th value the index keeps is its own choice)
      np.testing.assert_array_equal(s, brute_top_m(emb, 8)[1])


def test_progress_bar_and_opt_out(capsys):
  emb = clustered(300)
  for method in ("exact", "ivf"):
    jaxsel.knn_graph(emb, m=4, method=method, progress=False)
    assert capsys.readouterr().err == ""
    jaxsel.knn_graph(emb, m=4, method=method, progress=True)
    assert f"{method} kNN graph" in capsys.readouterr().err
  jaxsel.knn_graph(emb, m=4)  # small N: no bar by default
  assert capsys.readouterr().err == ""


def test_bad_inputs_fail_before_any_work(monkeypatch):
  def no_work(*a, **k):
    raise AssertionError("the build started")
  monkeypatch.setattr(knn_exact, "exact_top_m", no_work)
  monkeypatch.setattr(ann, "approximate_top_m", no_work)
  emb = clustered(20, d=4)
  nan = emb.copy()
  nan[3, 1] = np.nan
  cases = [
      (ValueError, "`m`", dict(m=21)),
      (ValueError, "`m`", dict(m=0)),
      (ValueError, "`m`", dict(m=True)),
      (ValueError, "`m`", dict(m=2.0)),
      (ValueError, "NaN", dict(embeddings=nan, m=2)),
      (ValueError, r"\[N, D\]", dict(embeddings=emb[0], m=2)),
      (ValueError, "method", dict(m=2, method="annoy")),
      (ValueError, "minmax", dict(m=2, nonneg="minmax")),
      (ValueError, "block", dict(m=2, block=0)),
      (ValueError, "valid", dict(m=2, valid=np.ones(19, bool))),
      (TypeError, "valid", dict(m=2, valid=np.ones(20))),
      (TypeError, "progress", dict(m=2, progress="yes")),
      (ValueError, "options", dict(m=2, options={"nprobe": 4})),
      (ValueError, "Unknown `options`", dict(m=2, method="ivf", options={"ef_search": 4})),
      (ValueError, "positive int", dict(m=2, method="hnsw", options={"M": 0})),
      (TypeError, "mapping", dict(m=2, method="hnsw", options=[("M", 4)])),
  ]
  for exc, match, kw in cases:
    kw = dict(dict(embeddings=emb), **kw)
    with pytest.raises(exc, match=match):
      jaxsel.knn_graph(kw.pop("embeddings"), **kw)
  with pytest.raises(TypeError, match="outside `jit`"):
    jax.jit(lambda e: jaxsel.knn_graph(e, m=2, method="ivf"))(emb)
  monkeypatch.setitem(sys.modules, "faiss", None)
  with pytest.raises(ImportError, match=r"jaxsel\[ann\]"):
    jaxsel.knn_graph(emb, m=2, method="hnsw")

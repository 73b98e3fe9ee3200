"""Scale: matrix-free and kNN objectives against the dense ones and NumPy references, and
sharded greedy/search against one device.

The multi-device checks need `XLA_FLAGS=--xla_force_host_platform_device_count=8` set before
jax is imported, so `test_eight_devices` runs this file as a script in a subprocess
(`python tests/test_scale.py` runs the same checks and prints them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

if __name__ == "__main__":  # the 8-device subprocess
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_force_host_platform_device_count=8").strip()

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel

N, D, Q, K = 37, 6, 3, 8


def _data(seed=0, n=N, d=D, q=Q):
  rng = np.random.default_rng(seed)
  emb = rng.normal(size=(n, d)).astype(np.float32)
  rel = rng.uniform(size=(q, n)).astype(np.float32)
  valid = rng.uniform(size=n) > 0.15
  costs = rng.integers(1, 6, n).astype(np.float32)
  return emb, rel, valid, costs


def _dense(kind, emb, rel, valid, nonneg="clip"):
  sim = jaxsel.cosine_similarity(emb, nonneg=nonneg)
  if kind == "coverage":
    return jaxsel.coverage(sim, valid=valid)
  if kind == "fl":
    return jaxsel.facility_location(sim, rel, valid=valid)
  return jaxsel.saturated_coverage(sim, rel, valid=valid)


def _matrix_free(kind, emb, rel, valid, **kw):
  if kind == "sc":
    return jaxsel.saturated_coverage_from_embeddings(emb, rel, valid=valid, **kw)
  return jaxsel.facility_location_from_embeddings(emb, None if kind == "coverage" else rel,
                                                  valid=valid, **kw)


def _knn(kind, graph_or_emb, rel, valid, **kw):
  if kind == "sc":
    return jaxsel.knn_saturated_coverage(graph_or_emb, rel, valid=valid, **kw)
  return jaxsel.knn_facility_location(graph_or_emb, None if kind == "coverage" else rel,
                                      valid=valid, **kw)


def _masks(n, num=4, seed=1):
  rng = np.random.default_rng(seed)
  return [rng.uniform(size=n) < p for p in np.linspace(0.05, 0.6, num)]


def _same_selection(a, b, rtol=1e-5):
  np.testing.assert_array_equal(a.indices, b.indices)
  assert int(a.count) == int(b.count)
  np.testing.assert_allclose(a.values, b.values, rtol=rtol, atol=1e-5)
  np.testing.assert_allclose(a.gains, b.gains, rtol=rtol, atol=1e-5)


# Jitted once per objective type and shape: eager `lax.scan`/`lax.map` would recompile per call.
_value = jax.jit(lambda obj, mask: obj.value(mask))
_gains = jax.jit(lambda obj, state, idx=None: obj.gains(state, idx))


@jax.jit
def _after_picks(obj):
  state = obj.init()
  for j in (3, 10, 20):
    state = obj.update(state, j)
  return state


@pytest.mark.parametrize("kind", ["coverage", "fl", "sc"])
def test_matrix_free_and_full_knn_equal_dense(kind):
  """Matrix-free (blocks that do not divide N) and kNN with m = N give the dense objective's
  values and gains (every candidate, and a block of ids longer than `block`), and the same
  greedy picks (lazy greedy, the default; once, for facility location: the protocol is the
  same for all three)."""
  emb, rel, valid, _ = _data()
  dense = _dense(kind, emb, rel, valid)
  forms = [_matrix_free(kind, emb, rel, valid, block=5),
           _knn(kind, emb, rel, valid, m=N, block=6)]
  state_d = _after_picks(dense)
  idx = jnp.array([0, 5, 5, 36, 11, 2, 9, 30, 17, 1, 4], jnp.int32)
  for obj in forms:
    assert obj.num_candidates == N
    for mask in _masks(N):
      np.testing.assert_allclose(_value(obj, mask), _value(dense, mask), rtol=1e-5)
    state = _after_picks(obj)
    np.testing.assert_allclose(obj.state_value(state), dense.state_value(state_d), rtol=1e-5)
    np.testing.assert_allclose(_gains(obj, state), _gains(dense, state_d), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_gains(obj, state, idx), _gains(dense, state_d, idx), rtol=1e-5,
                               atol=1e-6)
    if kind == "fl":
      _same_selection(jaxsel.greedy(obj, k=K), jaxsel.greedy(dense, k=K))


def test_budget_and_stochastic_on_matrix_free():
  emb, rel, valid, costs = _data(seed=2)
  dense = _dense("coverage", emb, rel, valid)
  mf = _matrix_free("coverage", emb, rel, valid, block=4)
  _same_selection(jaxsel.greedy(mf, k=K, costs=costs, budget=9.0, method="dense"),
                  jaxsel.greedy(dense, k=K, costs=costs, budget=9.0, method="dense"))
  key = jax.random.key(3)
  _same_selection(jaxsel.greedy(mf, k=K, method="stochastic", key=key),
                  jaxsel.greedy(dense, k=K, method="stochastic", key=key))


@pytest.mark.parametrize("nonneg", ["shift", "square"])
def test_matrix_free_nonneg_methods(nonneg):
  emb, rel, valid, _ = _data(seed=4)
  dense = _dense("fl", emb, rel, valid, nonneg=nonneg)
  mf = _matrix_free("fl", emb, rel, valid, nonneg=nonneg, block=8)
  for mask in _masks(N):
    np.testing.assert_allclose(_value(mf, mask), _value(dense, mask), rtol=1e-5)
  np.testing.assert_allclose(_gains(mf, _after_picks(mf)), _gains(dense, _after_picks(dense)),
                             rtol=1e-5, atol=1e-6)


def test_knn_graph_is_exact_top_m():
  emb, _, valid, _ = _data(seed=5)
  m = 6
  g = jaxsel.knn_graph(emb, m=m, valid=valid, block=8)
  e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
  sim = np.maximum(e @ e.T, 0)
  sim[:, ~valid] = -np.inf
  assert g.neighbors.shape == (N, m) and g.neighbors.dtype == jnp.int32
  for j in range(N):
    want = np.sort(sim[j])[::-1][:m]
    if valid[j]:
      np.testing.assert_allclose(g.similarities[j], want, rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(sim[j, np.asarray(g.neighbors[j])], want, rtol=1e-5, atol=1e-6)
      assert valid[np.asarray(g.neighbors[j])].all()
    else:
      assert not np.asarray(g.similarities[j]).any()


@pytest.mark.parametrize("kind", ["fl", "sc"])
def test_sparse_knn_matches_numpy_reference(kind):
  """m < N: the objective is facility location / saturated coverage on the similarity with
  only the kNN pairs kept; NumPy brute force (tests/reference.py) gives the same values and
  greedy picks."""
  import reference
  n = 18
  emb, rel, valid, _ = _data(seed=6, n=n, q=2)
  g = jaxsel.knn_graph(emb, m=4, valid=valid)
  obj = _knn(kind, g, rel, valid)
  sparse = np.zeros((n, n))  # sparse[i, j] = s_ij, i an item, j a candidate
  for j in range(n):
    for i, s in zip(np.asarray(g.neighbors[j]), np.asarray(g.similarities[j])):
      sparse[i, j] = max(sparse[i, j], s)
  f = ((lambda m: reference.fl_value(sparse, rel, m, valid)) if kind == "fl"
       else (lambda m: reference.sc_value(sparse, rel, m, valid)))
  for mask in _masks(n):
    np.testing.assert_allclose(_value(obj, mask), f(mask), rtol=1e-5)
  picks, gains, values = reference.greedy(f, n, 6, valid=valid)
  sel = jaxsel.greedy(obj, k=6)
  np.testing.assert_array_equal(np.asarray(sel.indices)[:len(picks)], picks)
  np.testing.assert_allclose(np.asarray(sel.values)[:len(values)], values, rtol=1e-5)


def test_knn_graph_from_an_index_and_stacked_batch():
  """The graph from `jaxsel.VectorIndex` top-m search of its own vectors (the README recipe)
  gives the objective `knn_graph` gives, and objectives stacked along a new axis run under
  `jax.vmap`."""
  emb, rel, _, _ = _data(seed=7)
  index = jaxsel.VectorIndex(dim=D)
  index.add(emb)
  hits = [index.search(index.embeddings[i:i + 16], k=5) for i in range(0, len(index), 16)]
  given = jaxsel.KnnGraph(np.concatenate([h.indices for h in hits]),
                          np.maximum(np.concatenate([h.scores for h in hits]), 0))
  a, b = _knn("fl", jaxsel.knn_graph(emb, m=5), rel, None), _knn("fl", given, rel, None)
  np.testing.assert_allclose(_value(a, _masks(N)[2]), _value(b, _masks(N)[2]), rtol=1e-5)
  np.testing.assert_allclose(np.sort(b.similarities, axis=1), np.sort(a.similarities, axis=1),
                             rtol=1e-5, atol=1e-6)
  # An index's missing hits (id -1, score -inf) are empty slots.
  holes = jaxsel.KnnGraph(np.array([[0, -1], [1, 0]]), np.array([[1.0, -np.inf], [1.0, 0.5]]))
  obj = jaxsel.knn_facility_location(holes)
  np.testing.assert_allclose(obj.similarities, [[1.0, 0.0], [1.0, 0.5]])
  objs = [_matrix_free("coverage", _data(seed=s)[0], None, None, block=16) for s in (8, 9)]
  stacked = jax.tree.map(lambda *x: jnp.stack(x), *objs)
  batch = jax.vmap(lambda o: jaxsel.greedy(o, k=K, method="dense"))(stacked)
  np.testing.assert_array_equal(batch.indices[1], jaxsel.greedy(objs[1], k=K, method="dense").indices)


@pytest.mark.parametrize("n", [0, 1])
def test_empty_and_single_candidate(n):
  emb, rel = np.ones((n, 3), np.float32), np.full((2, n), 0.5, np.float32)
  for obj in (jaxsel.facility_location_from_embeddings(emb, rel),
              jaxsel.knn_saturated_coverage(emb, rel, m=1)):
    sel = jaxsel.greedy(obj, k=n)
    assert sel.indices.shape == (n,) and int(sel.count) == n
    np.testing.assert_allclose(obj.value(np.ones(n, bool)), n * 1.0)
    np.testing.assert_allclose(sel.values, [1.0] * n)


def test_bad_inputs_fail_fast():
  emb, rel, valid, _ = _data()
  mesh = jax.make_mesh((1,), ("x",))
  cases = [
      (ValueError, "minmax", lambda: jaxsel.facility_location_from_embeddings(emb, nonneg="minmax")),
      (ValueError, r"\[N, D\]", lambda: jaxsel.facility_location_from_embeddings(emb[None])),
      (ValueError, "NaN", lambda: jaxsel.knn_graph(np.full((3, 2), np.nan), m=2)),
      (ValueError, "`m`", lambda: jaxsel.knn_graph(emb, m=N + 1)),
      (TypeError, "`m`", lambda: jaxsel.knn_facility_location(emb)),
      (TypeError, "relevance", lambda: jaxsel.saturated_coverage_from_embeddings(emb, None)),
      (ValueError, "relevance", lambda: jaxsel.facility_location_from_embeddings(emb, rel[:, :5])),
      (ValueError, "negative", lambda: jaxsel.facility_location_from_embeddings(emb, -rel)),
      (ValueError, "block", lambda: jaxsel.facility_location_from_embeddings(emb, block=0)),
      (ValueError, "item ids", lambda: jaxsel.knn_facility_location(
          jaxsel.KnnGraph(np.full((3, 2), 3), np.ones((3, 2))))),
      (ValueError, "negative", lambda: jaxsel.knn_facility_location(
          jaxsel.KnnGraph(np.zeros((3, 2), int), -np.ones((3, 2))))),
      (TypeError, "integer", lambda: jaxsel.knn_facility_location(
          jaxsel.KnnGraph(np.zeros((3, 2)), np.ones((3, 2))))),
      (TypeError, "Mesh", lambda: jaxsel.sharded_greedy(
          _dense("fl", emb, rel, valid), mesh="cpu", k=2)),
      (ValueError, "batch", lambda: jaxsel.sharded_greedy(
          _dense("fl", emb, rel, valid), mesh=mesh, k=2)),
      (ValueError, "one instance", lambda: jaxsel.candidate_sharded_greedy(
          jaxsel.coverage(np.ones((2, 3, 3))), mesh=mesh, k=2)),
      (ValueError, "`k`", lambda: jaxsel.candidate_sharded_greedy(
          _dense("fl", emb, rel, valid), mesh=mesh, k=N + 1)),
      (ValueError, "costs", lambda: jaxsel.candidate_sharded_greedy(
          _dense("fl", emb, rel, valid), mesh=mesh, k=2, costs=-np.ones(N), budget=3.0)),
      (ValueError, "axis", lambda: jaxsel.candidate_sharded_greedy(
          _dense("fl", emb, rel, valid), mesh=mesh, k=2, axis="y")),
      (TypeError, "objective", lambda: jaxsel.candidate_sharded_greedy(object(), mesh=mesh, k=2)),
      (ValueError, "leading batch axis", lambda: jaxsel.shard_batch(np.float32(1.0), mesh)),
      (ValueError, "same non-empty", lambda: jaxsel.sharded_vmap(lambda a, b: a + b, mesh=mesh)(
          np.ones(3), np.ones(4))),
      (ValueError, r"\[B, N\]", lambda: jaxsel.sharded_search(None, np.ones(4), mesh=mesh,
                                                              budget=1.0, iterations=2)),
  ]
  for exc, match, fn in cases:
    with pytest.raises(exc, match=match):
      fn()


# ---------------------------------------------------------------------------------------
# Multi-device checks (run in a subprocess with 8 host devices).


def _eight_device_checks() -> dict:
  assert len(jax.devices()) == 8, jax.devices()
  out = {}
  emb, rel, valid, costs = _data(seed=10, n=61)  # 61 candidates: not a multiple of 8
  mesh = jax.make_mesh((8,), ("x",))

  def same(a, b):
    return bool(np.array_equal(a.indices, b.indices)
                and np.allclose(a.values, b.values, rtol=1e-6, atol=1e-6))

  # Candidate parallel: dense, matrix-free and kNN objectives, several greedy methods.
  cases = {
      "dense_fl_lazy": (_dense("fl", emb, rel, valid), {}),
      "dense_sc_dense_budget": (_dense("sc", emb, rel, valid),
                                dict(method="dense", costs=costs, budget=10.0)),
      "matrix_free_fl_lazy": (_matrix_free("fl", emb, rel, valid, block=5), {}),
      "knn_coverage_lazy_min_gain": (_knn("coverage", emb, rel, valid, m=9), dict(min_gain=0.5)),
  }
  for name, (obj, kw) in cases.items():
    out["candidate/" + name] = same(jaxsel.candidate_sharded_greedy(obj, mesh=mesh, k=K, **kw),
                                    jaxsel.greedy(obj, k=K, **kw))
  # A 2-D mesh, candidates split over both axes.
  mesh2 = jax.make_mesh((4, 2), ("a", "b"))
  obj = _matrix_free("sc", emb, rel, valid, block=16)
  out["candidate/2d_mesh_matrix_free_sc"] = same(
      jaxsel.candidate_sharded_greedy(obj, mesh=mesh2, k=K), jaxsel.greedy(obj, k=K))
  # Data parallel greedy: a batch of 11 (padded to 16) facility-location problems.
  b = 11
  sims = jnp.stack([jaxsel.cosine_similarity(_data(seed=20 + i, n=24)[0]) for i in range(b)])
  objs = jaxsel.facility_location(sims)
  bcosts = jnp.asarray(np.random.default_rng(0).integers(1, 5, (b, 24)), jnp.float32)
  key = jax.random.key(0)
  got = jaxsel.sharded_greedy(objs, mesh=mesh, k=5, costs=bcosts, budget=8.0,
                              method="stochastic", key=key)
  want = jax.vmap(lambda o, c, kk: jaxsel.greedy(o, k=5, costs=c, budget=8.0, method="stochastic",
                                                 key=kk))(objs, bcosts, jax.random.split(key, b))
  out["data/greedy_budget_stochastic_b11"] = same(got, want)
  # Inputs already laid out over the devices (16 = 2 per device).
  placed = jaxsel.shard_batch(jax.tree.map(lambda x: jnp.concatenate([x, x[:5]]), objs), mesh)
  out["data/shard_batch_layout"] = placed.sim_t.sharding.spec[0] == "x"
  got = jaxsel.sharded_greedy(placed, mesh=mesh, k=5)
  host = jax.device_get(placed)
  want = jax.vmap(lambda o: jaxsel.greedy(o, k=5))(host)
  out["data/greedy_presharded_b16"] = same(got, want)
  # Plain `jit(vmap(greedy))` on the explicitly sharded batch: dense and stochastic steps (and
  # lazy below 257 candidates, which takes dense steps) keep the batch sharding.
  pcosts = jaxsel.shard_batch(np.concatenate([bcosts, bcosts[:5]]), mesh)
  pkeys = jaxsel.shard_batch(jax.random.split(key, 16), mesh)
  plain_ok = True
  for kw in (dict(), dict(method="dense"), dict(method="stochastic"), dict(method="dense", budget=8.0)):
    def one(o, c, kk, kw=kw):
      kw = dict(kw, key=kk) if kw.get("method") == "stochastic" else dict(kw)
      return jaxsel.greedy(o, k=5, costs=c if "budget" in kw else None, **kw)
    got = jax.jit(jax.vmap(one))(placed, pcosts, pkeys)
    want = jax.vmap(one)(host, jax.device_get(pcosts), jax.device_get(pkeys))
    plain_ok &= bool(same(got, want)) and got.indices.sharding.spec[0] == "x"
  out["data/plain_vmap_on_sharded_inputs"] = plain_ok
  # Data parallel CORAG search over 5 queries.
  rng = np.random.default_rng(1)
  unary = rng.uniform(size=(5, 7)).astype(np.float32)
  pair = rng.normal(0, 0.3, (5, 7, 7)).astype(np.float32)
  scorers = jax.vmap(lambda u, p: jaxsel.pairwise_scorer(p, unary=u, discount=0.8))(unary, pair)
  scosts = rng.integers(1, 5, (5, 7)).astype(np.float32)
  got = jaxsel.sharded_search(scorers, scosts, mesh=mesh, budget=9.0, iterations=6, max_depth=3)
  want = jax.vmap(lambda s, c: jaxsel.corag_search(s, c, budget=9.0, iterations=6, max_depth=3))(
      scorers, scosts)
  out["data/corag_search_b5"] = bool(np.array_equal(got.order, want.order)
                                     and np.allclose(got.value, want.value, rtol=1e-6)
                                     and np.array_equal(got.tree.visits, want.tree.visits))
  widening = np.asarray([0.0, 1.0, 2.0, 0.0, 1.0], np.float32)  # per query
  got = jaxsel.sharded_search(scorers, scosts, mesh=mesh, budget=9.0, iterations=6, max_depth=3,
                              exploration=0.5, normalize=True, widening=widening)
  want = jax.vmap(lambda s, c, w: jaxsel.corag_search(s, c, budget=9.0, iterations=6, max_depth=3,
                                                      exploration=0.5, normalize=True, widening=w))(
      scorers, scosts, widening)
  out["data/corag_search_normalized_b5"] = bool(np.array_equal(got.order, want.order)
                                                and np.array_equal(got.tree.visits, want.tree.visits))
  return out


@pytest.mark.slow
def test_eight_devices():
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  env["JAX_PLATFORMS"] = "cpu"
  proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  results = json.loads(proc.stdout.strip().splitlines()[-1])
  assert len(results) == 11, results
  failed = [name for name, ok in results.items() if not ok]
  assert not failed, results


@pytest.mark.slow
def test_multihost_example_two_processes():
  """The README's multi-host recipe: two processes (4 CPU devices each) joined by
  `jax.distributed.initialize`, candidate- and data-parallel greedy equal one device."""
  import socket
  with socket.socket() as sock:
    sock.bind(("localhost", 0))
    port = sock.getsockname()[1]
  script = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "multihost.py")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  procs = [subprocess.Popen(
      [sys.executable, script, "--coordinator", f"localhost:{port}", "--num-processes", "2",
       "--process-id", str(i), "--n", "300", "--k", "6"],
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  assert "candidate-parallel True, data-parallel True" in outs[0][0], outs[0][0]
  picks = [[line.split("picks")[1] for line in out.splitlines() if "candidate-parallel picks" in line]
           for out, _ in outs]
  assert picks[0] and picks[0] == picks[1]


if __name__ == "__main__":
  print(json.dumps(_eight_device_checks()))

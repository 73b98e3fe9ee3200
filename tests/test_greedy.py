"""Greedy against brute force, the exact optimum, itself (dense/lazy/jit/vmap) and bad input."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
import reference as ref
from jaxsel._src import greedy as greedy_lib
from instances import KINDS, _instance, _make

E = 1 - 1 / math.e
# "lazy" on at most 256 candidates takes dense steps unless `block` is given; "lazy-rounds"
# forces the lazy rounds on these small instances so that machinery stays tested.
METHODS = ["dense", "lazy", "lazy-rounds"]


@pytest.fixture(params=["auto", "xla"], autouse=True)
def gain_path(request, monkeypatch):
  """Every test here runs twice: with the C++ kernels (dense and lazy greedy on CPU,
  `backend="auto"`) and on the pure-XLA path (what stochastic greedy, the large forms and
  accelerators use): `jaxsel.greedy` is called with that `backend`."""
  monkeypatch.setattr(jaxsel, "greedy", functools.partial(greedy_lib.greedy, backend=request.param))
  return request.param


def _greedy(obj, method, **kw):
  if method == "lazy-rounds":
    return jaxsel.greedy(obj, method="lazy", block=min(2, obj.num_candidates), **kw)
  return jaxsel.greedy(obj, method=method, **kw)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 5, 50])
def test_greedy_equals_bruteforce(method, kind, n):
  sim, rel, valid = _instance(n, seed=10 + n, pad=n // 7)
  obj, f = _make(kind, sim, rel, valid)
  k = min(n, 8)
  picks, gains, values = ref.greedy(f, n, k, valid=valid)
  sel = _greedy(obj, method, k=k)
  assert int(sel.count) == len(picks)
  np.testing.assert_array_equal(sel.indices[: len(picks)], picks)
  assert (np.asarray(sel.indices[len(picks):]) == jaxsel.NO_ITEM).all()
  np.testing.assert_allclose(sel.gains[: len(picks)], gains, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(sel.values[: len(picks)], values, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_dense_equals_lazy_on_300(kind):
  sim, rel, valid = _instance(300, q=2, d=12, seed=5, pad=20)
  obj, f = _make(kind, sim, rel, valid)
  dense = jaxsel.greedy(obj, k=60, method="dense")
  for block in (None, 1, 7, 32):  # None: the default block, lazy rounds above 256 candidates
    lazy = jaxsel.greedy(obj, k=60, method="lazy", block=block)
    np.testing.assert_array_equal(lazy.indices, dense.indices)
    # blocks of another size may sum in another order: last-bit differences only
    np.testing.assert_allclose(lazy.gains, dense.gains, rtol=1e-6)
  # and the first picks agree with the float64 brute force
  picks, _, values = ref.greedy(f, 300, 5, valid=valid)
  np.testing.assert_array_equal(dense.indices[:5], picks)
  np.testing.assert_allclose(dense.values[:5], values, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_lazy_gathered_blocks_equal_streamed_rows(kind, monkeypatch):
  """Long rows are gathered into a block on CPU, short ones streamed; both give dense's picks."""
  from jaxsel._src.objectives import rows
  sim, rel, valid = _instance(301, q=2, d=12, seed=9, pad=11)  # N = 301: a shape of its own
  obj, _ = _make(kind, sim, rel, valid)
  dense = jaxsel.greedy(obj, k=40, method="dense")
  streamed = jaxsel.greedy(obj, k=40, method="lazy", block=16)
  monkeypatch.setattr(rows, "GATHER_MIN_N", 0)
  jax.clear_caches()
  gathered = jaxsel.greedy(obj, k=40, method="lazy", block=16)
  jax.clear_caches()
  for sel in (streamed, gathered):
    np.testing.assert_array_equal(sel.indices, dense.indices)
    np.testing.assert_allclose(sel.gains, dense.gains, rtol=1e-6)


def test_exact_ties_go_to_lowest_index():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(10, 4))
  x = np.concatenate([x, x, x])  # every item three times: exact ties everywhere
  obj = jaxsel.coverage(jaxsel.cosine_similarity(x))
  dense = jaxsel.greedy(obj, k=12, method="dense")
  lazy = jaxsel.greedy(obj, k=12, method="lazy", block=3)
  np.testing.assert_array_equal(dense.indices, lazy.indices)
  f = lambda m: ref.fl_value(np.asarray(jaxsel.cosine_similarity(x)), None, m)
  np.testing.assert_array_equal(dense.indices[:4], ref.greedy(f, 30, 4)[0])
  assert int(dense.indices[0]) < 10


def test_greedy_is_a_ranking():
  sim, rel, _ = _instance(40, seed=2)
  obj = jaxsel.facility_location(sim, rel)
  full = jaxsel.greedy(obj, k=15)
  for k in (1, 5, 14):
    np.testing.assert_array_equal(jaxsel.greedy(obj, k=k).indices, full.indices[:k])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(4))
def test_within_guarantee_of_exhaustive_optimum(kind, seed):
  n, k = 9, 3
  sim, rel, valid = _instance(n, d=3, seed=100 + seed)
  obj, f = _make(kind, sim, rel, valid)
  opt = ref.optimum(f, n, k)
  val = float(jaxsel.greedy(obj, k=k).values[-1])
  assert val >= E * opt - 1e-5
  assert val <= opt + 1e-5


@pytest.mark.parametrize("seed", range(6))
def test_budget_never_exceeded_and_guarantee(seed):
  n, k = 9, 9
  rng = np.random.default_rng(seed)
  sim, rel, _ = _instance(n, d=3, seed=200 + seed)
  costs = rng.integers(1, 10, n).astype(np.float32)
  budget = float(rng.integers(5, 20))
  obj = jaxsel.facility_location(sim, rel)
  f = lambda m: ref.fl_value(sim, rel, m)
  for method in METHODS:
    sel = _greedy(obj, method, k=k, costs=costs, budget=budget)
    picks = np.asarray(sel.indices[: int(sel.count)])
    assert costs[picks].sum() <= budget
    np.testing.assert_allclose(sel.cost, costs[picks].sum())
    np.testing.assert_allclose(sel.values[-1], ref.budgeted_greedy(f, n, k, costs=costs, budget=budget),
                               rtol=1e-5)
    opt = ref.optimum(f, n, n, costs=costs, budget=budget)
    assert float(sel.values[-1]) >= E / 2 * opt - 1e-5


def test_budget_beats_cost_benefit_trap():
  # Cost-benefit alone takes the cheap item and can no longer afford the valuable one.
  sim = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
  rel = np.array([0.02, 1.0], np.float32)
  obj = jaxsel.facility_location(sim, rel)
  sel = jaxsel.greedy(obj, k=2, costs=np.array([0.01, 1.0]), budget=1.0)
  assert list(np.asarray(sel.indices)) == [1, -1]


def test_min_gain_stops_at_saturation():
  sim, rel, _ = _instance(30, seed=4)
  obj, f = _make("coverage", sim, rel, None)
  full = jaxsel.greedy(obj, k=30, method="dense")
  thr = float(full.gains[6]) * 1.0001
  for method in METHODS:
    sel = _greedy(obj, method, k=30, min_gain=thr)
    assert int(sel.count) == len(ref.greedy(f, 30, 30, min_gain=thr)[0]) == 6
    np.testing.assert_array_equal(sel.indices[:6], full.indices[:6])
    assert (np.asarray(sel.indices[6:]) == -1).all()
    np.testing.assert_allclose(sel.values[6:], sel.values[5])
  assert int(jaxsel.saturation_point(full, rel_gain=0.5)) == int(
      np.argmax(np.asarray(full.gains) < 0.5 * float(full.gains[0])))


def test_stochastic_within_guarantee_in_expectation_and_reproducible():
  n, k, eps = 12, 4, 0.1
  sim, rel, _ = _instance(n, d=3, seed=7)
  obj, f = _make("facility_location", sim, rel, None)
  opt = ref.optimum(f, n, k)
  keys = jax.random.split(jax.random.key(0), 32)
  vals = jax.vmap(lambda key: jaxsel.greedy(obj, k=k, method="stochastic", key=key, epsilon=eps).values[-1])(keys)
  assert float(jnp.mean(vals)) >= (E - eps) * opt
  a = jaxsel.greedy(obj, k=k, method="stochastic", key=jax.random.key(3))
  b = jaxsel.greedy(obj, k=k, method="stochastic", key=jax.random.key(3))
  np.testing.assert_array_equal(a.indices, b.indices)
  assert len(set(np.asarray(a.indices).tolist())) == k


@pytest.mark.parametrize("method", METHODS)
def test_vmap_equals_loop_with_ragged_valid(method):
  b, n, k = 5, 20, 6
  sims = np.stack([_instance(n, seed=s)[0] for s in range(b)])
  rels = np.random.default_rng(1).random((b, 2, n)).astype(np.float32)
  counts = [20, 3, 11, 7, 1]
  valid = np.arange(n)[None] < np.array(counts)[:, None]
  objs = jaxsel.facility_location(sims, rels, valid=valid)
  batched = jax.vmap(lambda o: _greedy(o, method, k=k))(objs)
  for i in range(b):
    one = _greedy(jaxsel.facility_location(sims[i], rels[i], valid=valid[i]), method, k=k)
    np.testing.assert_array_equal(batched.indices[i], one.indices)
    np.testing.assert_allclose(batched.values[i], one.values, rtol=1e-6)
    picked = np.asarray(one.indices[: int(one.count)])
    assert valid[i][picked].all() and int(one.count) == min(k, counts[i])


def test_jit_and_no_retrace():
  chex.clear_trace_counter()  # the test runs once per gain path
  sim, rel, _ = _instance(16, seed=0)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def run(s, r):
    return jaxsel.greedy(jaxsel.saturated_coverage(s, r), k=4)

  a = run(sim, rel)
  b = run(sim * 0.5, rel)  # new values, same shapes: no second trace
  eager = jaxsel.greedy(jaxsel.saturated_coverage(sim, rel), k=4)
  np.testing.assert_array_equal(a.indices, eager.indices)
  assert b.indices.shape == (4,)
  before = greedy_lib._greedy._cache_size()
  for scale in (0.3, 0.7):
    jaxsel.greedy(jaxsel.coverage(sim * scale), k=4)
  assert greedy_lib._greedy._cache_size() - before <= 1


def test_k_zero_and_empty_ground_set():
  sel = jaxsel.greedy(jaxsel.coverage(np.eye(3)), k=0)
  assert sel.indices.shape == (0,) and int(sel.count) == 0
  sel = jaxsel.greedy(jaxsel.coverage(np.zeros((0, 0))), k=0)
  assert sel.indices.shape == (0,) and int(sel.count) == 0
  sel = jaxsel.greedy(jaxsel.coverage(np.eye(3)), k=0, costs=np.ones(3), budget=2.0)
  assert sel.indices.shape == (0,) and int(sel.count) == 0 and float(sel.cost) == 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(k=4), "k"),
    (dict(k=-1), "k"),
    (dict(k=2.0), "int"),
    (dict(k=2, method="fast"), "method"),
    (dict(k=2, budget=3.0), "costs"),
    (dict(k=2, costs=np.ones(3)), "budget"),
    (dict(k=2, costs=np.array([1.0, -1.0, 1.0]), budget=2.0), "non-negative"),
    (dict(k=2, costs=np.array([1.0, np.nan, 1.0]), budget=2.0), "NaN"),
    (dict(k=2, costs=np.ones(4), budget=2.0), "shape"),
    (dict(k=2, costs=np.ones(3), budget=-1.0), "budget"),
    (dict(k=2, method="stochastic"), "key"),
    (dict(k=2, method="stochastic", key=jax.random.key(0), epsilon=1.5), "epsilon"),
    (dict(k=2, block=0), "block"),
])
def test_bad_input_errors(kwargs, match):
  with pytest.raises((ValueError, TypeError), match=match):
    jaxsel.greedy(jaxsel.coverage(np.eye(3)), **kwargs)
  with pytest.raises(TypeError, match="objective"):
    jaxsel.greedy(np.eye(3), k=1)


def test_shapes_of_one_instance_are_checked_before_tracing():
  """Batched arguments without `vmap` used to fail deep inside JAX or the native kernel."""
  sim = np.eye(4, dtype=np.float32) * 0.5 + 0.5
  obj = jaxsel.facility_location(sim)
  costs = np.ones(4, np.float32)
  with pytest.raises(ValueError, match=r"`costs` must have shape \[N\] = \[4\].*vmap"):
    jaxsel.greedy(obj, k=2, costs=np.ones((2, 4), np.float32), budget=3.0)
  with pytest.raises(ValueError, match=r"`budget` must be a scalar.*vmap"):
    jaxsel.greedy(obj, k=2, costs=costs, budget=np.ones(2, np.float32))
  with pytest.raises(ValueError, match=r"`min_gain` must be a scalar"):
    jaxsel.greedy(obj, k=2, min_gain=np.ones(2))
  batch = jaxsel.facility_location(np.stack([sim, sim]))
  with pytest.raises(ValueError, match=r"`objective` is a batch.*jax.vmap"):
    jaxsel.greedy(batch, k=2)
  sel = jax.vmap(lambda o: jaxsel.greedy(o, k=2))(batch)  # the way that works
  assert sel.indices.shape == (2, 2)


def test_saturation_point_of_no_picks():
  empty = jaxsel.Selection(indices=jnp.zeros((0,), jnp.int32), gains=jnp.zeros((0,)),
                           values=jnp.zeros((0,)), count=jnp.zeros((), jnp.int32), cost=jnp.zeros(()),
                           bound=jnp.zeros(()), certified=jnp.ones(()))
  assert int(jaxsel.saturation_point(empty)) == 0
  none_taken = jaxsel.greedy(jaxsel.coverage(np.ones((3, 3), np.float32)), k=2, min_gain=1e9)
  assert int(none_taken.count) == 0 and int(jaxsel.saturation_point(none_taken)) == 0

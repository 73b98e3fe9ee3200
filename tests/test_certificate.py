"""Greedy's certificate (`Selection.bound`, `.certified`): never below the exact optimum
(brute force over all subsets, and a property test), equal to a NumPy reference of the online
bound on the dense path, the same for vmap / the native kernel, never tighter with lazy
greedy's stale gains, NaN for stochastic greedy. And what a CORAG search knows of its optimum."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jaxsel
import reference as ref
from jaxsel._src import greedy as greedy_lib
from jaxsel._src import tree as tree_lib
from jaxsel._src.scorers import basic as scorers
from instances import KINDS, _instance, _make

TOL = 1e-5  # float32 sums in another order than the float64 reference
N = 7  # one shape for every instance here (fewer compilations); padding varies the size
# (method, backend, block): the XLA loop's dense steps and lazy rounds (forced by `block`),
# and the native kernel's dense and lazy (CELF) runs.
PATHS = [("dense", "xla", None), ("lazy", "xla", 2), ("dense", "native", None), ("lazy", "native", None)]


def _costs(seed, n=N):
  c = np.random.default_rng(seed + 100).integers(1, 6, n).astype(np.float32)
  c[seed % n] = 0  # a free candidate
  return c


def _run(obj, path, k, costs=None, budget=None, **kw):
  method, backend, block = path
  return jaxsel.greedy(obj, k=k, costs=costs, budget=budget, method=method, backend=backend,
                       block=block, **kw)


def _optimum(f, k, valid, costs, budget):
  return ref.optimum(f, N, k, valid=valid, costs=costs, budget=budget)


def _reference_bound(f, k, valid, costs, budget):
  """The dense path's certificate from its definition: the least prefix bound over greedy's
  steps (both runs with costs), no lower than the value of what greedy returns."""
  if costs is None:
    bound = ref.greedy_bound(f, N, k, valid=valid)
    value = ref.greedy(f, N, k, valid=valid)[2]
    return max(bound, value[-1] if value else 0.0)
  bound = min(ref.greedy_bound(f, N, k, valid=valid, costs=costs, budget=budget, ratio=r)
              for r in (True, False))
  return max(bound, ref.budgeted_greedy(f, N, k, costs=costs, budget=budget, valid=valid))


CASES = [(3, None), (N, 7.0), (2, 6.0)]  # k = 1 and tiny budgets: the property test


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k,budget", CASES)
def test_bound_is_above_the_optimum_and_equals_the_reference(kind, k, budget):
  for seed in range(3):
    sim, rel, valid = _instance(N, seed=seed, pad=seed)
    obj, f = _make(kind, sim, rel, valid)
    costs = None if budget is None else _costs(seed)
    opt = _optimum(f, k, valid, costs, budget)
    want = _reference_bound(f, k, valid, costs, budget)
    bounds = {}
    for path in PATHS:
      s = _run(obj, path, k, costs, budget)
      b, c, v = float(s.bound), float(s.certified), float(s.values[-1])
      assert b >= opt * (1 - TOL), (path, b, opt)
      assert 0 <= c <= 1 and c == pytest.approx(v / b if b > 0 else 1.0, rel=1e-6), path
      bounds[path] = b
    dense_xla, lazy_xla, dense_native, lazy_native = (bounds[p] for p in PATHS)
    assert dense_xla == pytest.approx(want, rel=TOL)
    # Stale gains are upper bounds of the fresh ones at the same prefix: never tighter. The
    # native dense run keeps the last gains of candidates the spent budget excludes (it does
    # not evaluate them again), so only without costs is it dense greedy's bound exactly.
    for b in (lazy_xla, dense_native, lazy_native):
      assert b >= dense_xla * (1 - TOL)
    if budget is None:
      assert dense_native == pytest.approx(dense_xla, rel=TOL)


@settings(max_examples=20)
@given(kind=st.sampled_from(KINDS), seed=st.integers(0, 10_000), pad=st.integers(0, N - 1),
       k=st.sampled_from([1, 4]), budget=st.one_of(st.none(), st.floats(0, 12)),
       path=st.sampled_from(PATHS))
def test_property_bound_never_below_the_optimum(kind, seed, pad, k, budget, path):
  sim, rel, valid = _instance(N, q=1 + seed % 2, seed=seed, pad=pad)
  obj, f = _make(kind, sim, rel, valid)
  costs = None if budget is None else _costs(seed)
  if budget is not None:
    budget = np.float32(budget)
  s = _run(obj, path, k, costs, budget)
  opt = _optimum(f, k, valid, costs, budget)
  assert float(s.bound) >= opt * (1 - TOL) - 1e-6
  assert 0 <= float(s.certified) <= 1
  assert float(s.certified) * float(s.bound) == pytest.approx(float(s.values[-1]), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("path", PATHS)
def test_vmap_gives_each_instance_its_certificate(path):
  sims, rels, valids = zip(*[_instance(N, seed=s, pad=s % 3) for s in range(3)])
  costs = np.stack([_costs(s) for s in range(3)])
  budgets = np.asarray([3.0, 6.0, 9.0], np.float32)
  objs = jaxsel.facility_location(np.stack(sims), np.stack(rels), valid=np.stack(valids))
  run = functools.partial(_run, path=path, k=3)
  batch = jax.vmap(lambda o, c, b: run(o, costs=c, budget=b))(objs, costs, budgets)
  assert batch.bound.shape == batch.certified.shape == (3,)
  for i in range(3):  # one instance (`jaxsel.greedy` is itself a jitted program)
    s = run(jaxsel.facility_location(sims[i], rels[i], valid=valids[i]), costs=costs[i],
            budget=budgets[i])
    np.testing.assert_allclose(float(s.bound), float(batch.bound[i]), rtol=1e-6)
    np.testing.assert_allclose(float(s.certified), float(batch.certified[i]), rtol=1e-6)


def test_stochastic_greedy_has_no_certificate():
  sim, rel, valid = _instance(N)
  s = jaxsel.greedy(jaxsel.facility_location(sim, rel), k=3, method="stochastic",
                    key=jax.random.key(0))
  assert np.isnan(float(s.bound)) and np.isnan(float(s.certified))


def test_no_picks_allowed_and_greedy_optimal():
  sim, rel, valid = _instance(N)
  obj = jaxsel.facility_location(sim, rel)
  s = jaxsel.greedy(obj, k=0)
  assert float(s.bound) == 0 and float(s.certified) == 1  # OPT over no picks is f(∅) = 0
  # Identity similarity, one query: f is modular, greedy is optimal and the bound is tight.
  obj = jaxsel.facility_location(np.eye(N, dtype=np.float32), np.linspace(1, 2, N, dtype=np.float32))
  for path in PATHS:
    s = _run(obj, path, 3)
    assert float(s.certified) == pytest.approx(1.0, rel=1e-6), path


def test_gain_bound_fractional_knapsack_by_hand():
  u = jnp.asarray([4.0, 3.0, 10.0, 1.0, 2.0])
  costs = jnp.asarray([2.0, 3.0, 10.0, 0.0, 4.0])
  ok = jnp.asarray([True, True, True, True, False])
  # ratios 2, 1, 1, inf (free), -: the free 1, then 4 (cost 2), then ratio 1 for the 4 left
  # of the budget 6 = 4 more; the 3 largest gains add 17.
  assert float(greedy_lib._gain_bound(u, ok, costs, 6.0, 3)) == pytest.approx(9.0)
  assert float(greedy_lib._gain_bound(u, ok, costs, 100.0, 2)) == pytest.approx(14.0)
  assert float(greedy_lib._gain_bound(u, ok, None, None, 2)) == pytest.approx(14.0)


def _orders_within(costs, budget, depth):
  n = len(costs)
  for size in range(1, depth + 1):
    for p in itertools.permutations(range(n), size):
      if costs[list(p)].sum() <= budget:
        yield np.asarray(list(p) + [-1] * (depth - size), np.int32)


def test_corag_search_estimate():
  """Exhausted: the answer is the exact optimum over every order within the budget (brute
  force) and the estimate is its value; otherwise the estimate is at least the best found."""
  rng = np.random.default_rng(0)
  n = 4
  sc = scorers.pairwise_scorer(rng.normal(0, 0.4, (n, n)).astype(np.float32),
                               unary=rng.uniform(0, 1, n).astype(np.float32), discount=0.8)
  costs = np.asarray([1, 2, 2, 3], np.float32)
  res = jaxsel.corag_search(sc, costs, budget=5.0, iterations=30)
  exhausted, best, estimate = tree_lib.search_estimate(res.tree, 2.4)
  brute = max(float(sc(o)) for o in _orders_within(costs, 5.0, n))
  assert bool(exhausted) and float(best) == float(res.value) == pytest.approx(brute, rel=1e-6)
  assert float(estimate) == float(best)
  res = jaxsel.corag_search(sc, costs, budget=8.0, iterations=2)
  exhausted, best, estimate = tree_lib.search_estimate(res.tree, 2.4)
  assert not bool(exhausted) and float(best) == float(res.value)
  assert float(estimate) > float(best)  # the exploration term of a node visited once

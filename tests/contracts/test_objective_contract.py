"""The `jaxsel.Objective` contract, asserted against every objective class: what `greedy`,
the scorers and candidate sharding rely on, checked against the objective's own `value`."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
from compiles import CompileCounter
from jaxsel._src.base import KernelObjective

N = 9


def _objectives():
  rng = np.random.default_rng(0)
  e = rng.normal(size=(N, 5)).astype(np.float32)
  rel = np.abs(rng.normal(size=(2, N))).astype(np.float32)
  valid = np.ones(N, bool)
  valid[4] = False
  sim = np.asarray(jaxsel.cosine_similarity(e))
  graph = jaxsel.knn_graph(e, m=4)
  return {
      "coverage": jaxsel.coverage(sim, valid=valid),
      "facility_location": jaxsel.facility_location(sim, rel, valid=valid),
      "saturated_coverage": jaxsel.saturated_coverage(sim, rel, valid=valid),
      "matrix_free_fl": jaxsel.facility_location_from_embeddings(e, rel, valid=valid, block=4),
      "matrix_free_sc": jaxsel.saturated_coverage_from_embeddings(e, rel, valid=valid, block=4),
      "knn_fl": jaxsel.knn_facility_location(graph, rel, valid=valid, block=4),
      "knn_sc": jaxsel.knn_saturated_coverage(graph, rel, valid=valid, block=4),
  }


OBJECTIVES = _objectives()


@pytest.fixture(params=sorted(OBJECTIVES), ids=str)
def obj(request):
  return OBJECTIVES[request.param]


def _mask(js):
  m = np.zeros(N, bool)
  m[list(js)] = True
  return m


def test_is_an_objective(obj):
  assert isinstance(obj, jaxsel.Objective)
  assert obj.num_candidates == obj.valid.shape[-1] == N
  fields = {f.name for f in dataclasses.fields(obj)}
  assert set(type(obj).candidate_axes) <= fields
  for name, axis in type(obj).candidate_axes.items():
    x = getattr(obj, name)
    if axis is not None and x is not None:
      assert x.shape[axis] == N, (name, axis, x.shape)


def test_gains_update_and_state_value_agree_with_value(obj):
  picks = [2, 7, 0]
  state = obj.init()
  assert float(obj.state_value(state)) == pytest.approx(float(obj.value(_mask([]))), abs=1e-6)
  for t, j in enumerate(picks):
    before = float(obj.value(_mask(picks[:t])))
    gains = np.asarray(obj.gains(state))
    idx = jnp.asarray([j, 1, j], jnp.int32)
    np.testing.assert_allclose(np.asarray(obj.gains(state, idx)), gains[np.asarray(idx)], rtol=1e-5,
                               atol=1e-6)
    for c in range(N):
      if obj.valid[c] and c not in picks[:t]:
        want = float(obj.value(_mask(picks[:t] + [c]))) - before
        assert gains[c] == pytest.approx(want, rel=1e-4, abs=1e-5), (c, t)
    state = obj.update(state, jnp.asarray(j))
    assert float(obj.state_value(state)) == pytest.approx(float(obj.value(_mask(picks[:t + 1]))),
                                                          rel=1e-5, abs=1e-6)


def test_monotone_and_submodular_on_all_small_sets(obj):
  small = [0, 1, 2, 3]
  v = {s: float(obj.value(_mask(s))) for r in range(5) for s in itertools.combinations(small, r)}
  for a in v:
    for b in v:
      if set(a) <= set(b):
        assert v[a] <= v[b] + 1e-5
        for c in set(small) - set(b):
          ga = v[tuple(sorted(a + (c,)))] - v[a]
          gb = v[tuple(sorted(b + (c,)))] - v[b]
          assert gb <= ga + 1e-5


def test_objective_carries_no_kernel_hooks():
  """Kernels are not part of the `Objective` contract: they are the optional
  `KernelObjective`, which the dense and matrix-free objectives implement and the kNN ones do
  not (greedy runs its own loop for those)."""
  assert not hasattr(jaxsel.Objective, "with_backend")
  assert not hasattr(jaxsel.Objective, "fused_greedy")
  kernels = {name for name, o in OBJECTIVES.items() if isinstance(o, KernelObjective)}
  assert kernels == set(OBJECTIVES) - {"knn_fl", "knn_sc"}


def test_backends_and_fused_greedy_give_the_loop_s_picks(obj):
  loop = jaxsel.greedy(obj, k=4, method="dense", backend="xla")
  np.testing.assert_array_equal(jaxsel.greedy(obj, k=4).indices, loop.indices)
  if not isinstance(obj, KernelObjective):
    return
  xla = obj.with_backend("xla")
  assert type(xla) is type(obj)
  np.testing.assert_allclose(xla.gains(xla.init()), obj.gains(obj.init()), rtol=1e-6, atol=1e-6)
  fused = obj.fused_greedy(None, jnp.inf, None, k=4, lazy=False, ratio=False)
  if fused is not None:
    np.testing.assert_array_equal(fused.indices, loop.indices)


def test_a_pytree_for_jit_and_vmap(obj):
  leaves, tree = jax.tree.flatten(obj)
  back = jax.tree.unflatten(tree, leaves)
  assert type(back) is type(obj)
  stacked = jax.tree.map(lambda x: jnp.stack([x, x]), obj)
  vals = jax.jit(jax.vmap(lambda o: o.value(jnp.asarray(_mask([1, 3])))))(stacked)
  np.testing.assert_allclose(vals, [float(obj.value(_mask([1, 3])))] * 2, rtol=1e-5)


COMPILES = CompileCounter()


def test_eager_calls_compile_once_per_shape(obj):
  """Called outside `jit` again with new values of the same shapes, no method compiles a new
  program. The matrix-free and kNN objectives compiled one at every eager `value` and `gains`
  (a `lax.scan` / `lax.map` over a new closure, about a second each), and JAX's cache kept each
  with its memory mappings: a loop of eager calls could exhaust the process's mappings."""
  def calls(picks, j):
    obj.value(_mask(picks))
    state = obj.update(obj.init(), jnp.asarray(j))
    obj.gains(state)
    obj.gains(state, jnp.asarray([j, 1, j], jnp.int32))
    return obj.state_value(state)

  calls([1, 3], 2)
  with COMPILES:
    calls([0, 5, 6], 7)
  assert COMPILES.count == 0

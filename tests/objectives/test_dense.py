"""Objectives against the NumPy definitions; monotonicity and submodularity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import jaxsel
import reference as ref
from instances import KINDS, _instance, _make




@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 5, 50])
def test_value_gains_update_match_reference(kind, n):
  sim, rel, valid = _instance(n, seed=n, pad=n // 5)
  obj, f = _make(kind, sim, rel, valid)
  rng = np.random.default_rng(1)
  order = rng.permutation(n)[: min(n, 6)]
  state = obj.init()
  mask = np.zeros(n, bool)
  for j in order:
    g = np.asarray(obj.gains(state))
    for c in range(n):
      t = mask.copy()
      t[c] = True
      np.testing.assert_allclose(g[c], f(t) - f(mask), rtol=1e-5, atol=1e-5)
    idx = jnp.asarray(rng.permutation(n)[: max(1, n // 2)], jnp.int32)
    np.testing.assert_allclose(obj.gains(state, idx), g[np.asarray(idx)], rtol=1e-6, atol=1e-6)
    state = obj.update(state, j)
    mask[j] = True
    np.testing.assert_allclose(obj.state_value(state), f(mask), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(obj.value(mask), f(mask), rtol=1e-5, atol=1e-5)


def test_value_of_large_instance_and_jit_agree():
  sim, rel, valid = _instance(300, q=3, seed=3, pad=17)
  obj = jaxsel.facility_location(sim, rel, valid=valid)
  mask = np.random.default_rng(0).random(300) < 0.1
  expect = ref.fl_value(sim, rel, mask, valid)
  np.testing.assert_allclose(obj.value(mask), expect, rtol=1e-5)
  np.testing.assert_allclose(jax.jit(lambda o, m: o.value(m))(obj, mask), expect, rtol=1e-5)


def test_relevance_vector_is_one_query_and_none_is_coverage():
  sim, rel, _ = _instance(7)
  mask = np.array([1, 0, 1, 0, 0, 1, 0], bool)
  a = jaxsel.facility_location(sim, rel[0]).value(mask)
  b = jaxsel.facility_location(sim, rel[:1]).value(mask)
  np.testing.assert_allclose(a, b)
  np.testing.assert_allclose(jaxsel.facility_location(sim).value(mask), jaxsel.coverage(sim).value(mask))


@pytest.mark.parametrize("shape", [(7, 7), (3, 9, 9), (1030, 1030)])
def test_numpy_input_is_transposed_on_the_host_exactly(shape):
  """NumPy similarities take the host path (tiled transpose, zero-copy `device_put`); it must
  give the same objective as a device array, masks and float64 inputs included."""
  rng = np.random.default_rng(shape[-1])
  sim = rng.random(shape)  # float64
  valid = rng.random(shape[:-1]) > 0.3
  rel = rng.random(shape[:-2] + (2, shape[-1]))
  for mask in (None, valid):
    for kind in ("fl", "sc"):
      build = (lambda s, v: jaxsel.facility_location(s, rel, valid=v)) if kind == "fl" else \
          (lambda s, v: jaxsel.saturated_coverage(s, rel, valid=v))
      host = build(sim, mask)
      dev = build(jnp.asarray(sim), None if mask is None else jnp.asarray(mask))
      assert host.sim_t.dtype == dev.sim_t.dtype == jnp.float32
      np.testing.assert_array_equal(np.asarray(host.sim_t), np.asarray(dev.sim_t))
      np.testing.assert_array_equal(np.asarray(host.relevance), np.asarray(dev.relevance))
  with pytest.raises(ValueError, match="NaN or infinite"):
    jaxsel.coverage(np.array([[1e300, 0.0], [0.0, 1.0]]))  # finite in float64, inf in float32


def test_objectives_pass_through_vmap_with_leading_axis():
  sims = np.stack([_instance(6, seed=s)[0] for s in range(3)])
  objs = jaxsel.coverage(sims)  # a batch of objectives: every leaf has a leading [3]
  masks = np.random.default_rng(0).random((3, 6)) < 0.5
  got = jax.vmap(lambda o, m: o.value(m))(objs, masks)
  want = [ref.fl_value(sims[b], None, masks[b]) for b in range(3)]
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cosine_similarity_and_nonnegative():
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=(4, 5)), rng.normal(size=(3, 5))
  raw = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T
  np.testing.assert_allclose(jaxsel.cosine_similarity(a, b, nonneg=None), raw, atol=1e-6)
  np.testing.assert_allclose(jaxsel.cosine_similarity(a, b), np.maximum(raw, 0), atol=1e-6)
  np.testing.assert_allclose(jaxsel.contrib.nonnegative(raw, method="shift"), (raw + 1) / 2, atol=1e-6)
  np.testing.assert_allclose(jaxsel.contrib.nonnegative(raw, method="square"), raw**2, atol=1e-6)
  mm = np.asarray(jaxsel.contrib.nonnegative(raw, method="minmax"))
  assert mm.min() == 0 and abs(mm.max() - 1) < 1e-6
  with pytest.raises(ValueError, match="method"):
    jaxsel.contrib.nonnegative(raw, method="abs")


@st.composite
def _nested_sets(draw):
  n = draw(st.integers(2, 8))
  seed = draw(st.integers(0, 10_000))
  kind = draw(st.sampled_from(KINDS))
  b = draw(st.lists(st.booleans(), min_size=n, max_size=n))
  a = [x and draw(st.booleans()) for x in b]  # A ⊆ B
  j = draw(st.integers(0, n - 1))
  return n, seed, kind, np.array(a), np.array(b), j


@given(_nested_sets())
def test_monotone_and_submodular(case):
  n, seed, kind, a, b, j = case
  sim, rel, valid = _instance(n, seed=seed)
  obj, _ = _make(kind, sim, rel, valid)
  fa, fb = float(obj.value(a)), float(obj.value(b))
  aj, bj = a.copy(), b.copy()
  aj[j] = bj[j] = True
  faj, fbj = float(obj.value(aj)), float(obj.value(bj))
  assert fb >= fa - 1e-5  # monotone
  assert faj - fa >= fbj - fb - 1e-5  # diminishing returns


@pytest.mark.parametrize("bad, match", [
    (lambda: jaxsel.coverage(np.ones((3, 4))), "square"),
    (lambda: jaxsel.coverage(np.ones(3)), "square"),
    (lambda: jaxsel.coverage(np.array([[1.0, np.nan], [0.0, 1.0]])), "NaN"),
    (lambda: jaxsel.coverage(np.array([[1.0, -0.5], [-0.5, 1.0]])), "nonnegative"),
    (lambda: jaxsel.facility_location(np.eye(3), np.ones((2, 4))), "relevance"),
    (lambda: jaxsel.facility_location(np.eye(3), np.array([1.0, np.inf, 0.0])), "relevance"),
    (lambda: jaxsel.saturated_coverage(np.eye(3), None), "relevance"),
    (lambda: jaxsel.coverage(np.eye(3), valid=np.ones(3)), "bool"),
    (lambda: jaxsel.coverage(np.eye(3), valid=np.ones(4, bool)), "valid"),
    (lambda: jaxsel.coverage("abc"), "array"),
    (lambda: jaxsel.cosine_similarity(np.ones(3)), "N, D"),
])
def test_bad_input_errors(bad, match):
  with pytest.raises((ValueError, TypeError), match=match):
    bad()


def test_matrix_beyond_memory_is_a_clear_error_before_allocating(monkeypatch):
  """XLA:CPU aborts the process (SIGABRT) on an allocation it cannot make; the size is known
  from the shapes, so the error comes first and names the objectives that need no matrix."""
  emb = np.ones((300_000, 4), np.float32)  # [N, N] float32 would be 360 GB
  with pytest.raises(MemoryError, match=r"GiB.*facility_location_from_embeddings"):
    jaxsel.cosine_similarity(emb)
  huge = np.broadcast_to(np.float32(0.5), (200_000, 200_000))  # a view: no memory behind it
  for build in (lambda s: jaxsel.facility_location(s), lambda s: jaxsel.coverage(s),
                lambda s: jaxsel.saturated_coverage(s, np.ones(200_000, np.float32))):
    with pytest.raises(MemoryError, match="knn_facility_location"):
      build(huge)
  # The check follows the memory there is: with plenty free it lets a moderate matrix through.
  from jaxsel._src import checks
  monkeypatch.setattr(checks, "available_bytes", lambda: 1 << 31)
  with pytest.raises(MemoryError, match="only 2.0 GiB is free"):
    jaxsel.cosine_similarity(np.ones((20_000, 4), np.float32))  # 2 × 1.6 GB


def _sym(n, seed=0, dtype=np.float32):
  sim = np.asarray(jaxsel.cosine_similarity(np.random.default_rng(seed).normal(size=(n, 6))))
  sim = np.maximum(sim, sim.T).astype(dtype)  # exactly symmetric
  return sim


@pytest.mark.parametrize("n", [1, 7, 8, 33, 300])
def test_symmetric_input_is_used_without_a_copy(n):
  """A symmetric matrix is its own candidate-major layout: a CPU jax.Array is kept as it is,
  aligned NumPy memory is shared, an unaligned one gives the same matrix; a non-symmetric one is
  transposed. The objective is the same either way."""
  sim = _sym(n, seed=n)
  dev = jnp.asarray(sim)
  assert jaxsel.coverage(dev).sim_t is dev
  aligned = np.empty(n * n + 16, np.float32)
  start = (-aligned.ctypes.data) % 64 // 4
  aligned = aligned[start:start + n * n].reshape(n, n)
  aligned[...] = sim
  obj = jaxsel.coverage(aligned)
  assert obj.sim_t.unsafe_buffer_pointer() == aligned.ctypes.data
  unaligned = np.empty(n * n + 1, np.float32)[1:].reshape(n, n)
  unaligned[...] = sim
  np.testing.assert_array_equal(jaxsel.coverage(unaligned).sim_t, sim)
  for symmetric in (None, True, False):
    np.testing.assert_array_equal(jaxsel.coverage(sim, symmetric=symmetric).sim_t, sim)
  assert jaxsel.coverage(dev, symmetric=True).sim_t is dev
  assert jaxsel.coverage(aligned, symmetric=True).sim_t.unsafe_buffer_pointer() == aligned.ctypes.data
  if n > 1:
    asym = sim.copy()
    asym[n - 1, 0] += 0.25
    for built in (jaxsel.coverage(asym), jaxsel.coverage(jnp.asarray(asym)),
                  jaxsel.coverage(asym, symmetric=False)):
      np.testing.assert_array_equal(built.sim_t, asym.T)
    # A promise is not verified: the objective of the matrix as given, rows as candidates.
    np.testing.assert_array_equal(jaxsel.coverage(asym, symmetric=True).sim_t, asym)
    neg = sim.copy()
    neg[0, n - 1] = neg[n - 1, 0] = -0.5
    for s in (neg, jnp.asarray(neg)):
      with pytest.raises(ValueError, match="nonnegative"):
        jaxsel.coverage(s, symmetric=True)


@pytest.mark.parametrize("n", [3, 8, 37, 300])
def test_symmetry_found_in_the_checking_pass(n, monkeypatch):
  """One float32 matrix, `symmetric=None`, that the device array can share (a jax.Array, or
  NumPy memory aligned to 64 bytes): the checking pass also tests symmetry (a randomized test
  on the entries' bits), so a symmetric one is never transposed; one asymmetric entry anywhere
  (one ulp, at the ragged edge too) is found and transposed. NumPy's own (unaligned) arrays are
  transposed by NumPy. The caller's array is left as it was; picks equal those of the
  transposing path."""
  from jaxsel._src.objectives import dense
  sim = _sym(n, seed=n)
  unaligned = np.empty(n * n + 1, np.float32)[1:].reshape(n, n)
  unaligned[...] = sim
  aligned = np.empty(n * n + 16, np.float32)
  start = (-aligned.ctypes.data) % 64 // 4
  aligned = aligned[start:start + n * n].reshape(n, n)
  aligned[...] = sim
  transpose = dense._numpy_candidate_major

  def never(*a, **kw):
    raise AssertionError("a symmetric matrix was transposed")

  monkeypatch.setattr(dense, "_numpy_candidate_major", never)
  for s in (aligned, jnp.asarray(sim)):
    obj = jaxsel.coverage(s)
    np.testing.assert_array_equal(obj.sim_t, sim)
    np.testing.assert_array_equal(np.asarray(s), sim)  # untouched
  assert jaxsel.coverage(aligned).sim_t.unsafe_buffer_pointer() == aligned.ctypes.data
  monkeypatch.setattr(dense, "_numpy_candidate_major", transpose)
  np.testing.assert_array_equal(jaxsel.coverage(unaligned).sim_t, sim)
  k = min(n, 5)
  want = jaxsel.greedy(jaxsel.coverage(sim, symmetric=False), k=k).indices
  np.testing.assert_array_equal(jaxsel.greedy(jaxsel.coverage(unaligned), k=k).indices, want)
  rng = np.random.default_rng(n)
  for i, j in ((n - 1, 0), (0, n - 1), tuple(rng.integers(0, n, 2))):
    if i == j:
      continue
    asym = sim.copy()
    asym[i, j] = np.nextafter(asym[i, j], np.float32(2))
    un = np.empty(n * n + 1, np.float32)[1:].reshape(n, n)
    un[...] = asym
    for s in (asym, un, jnp.asarray(asym)):
      np.testing.assert_array_equal(jaxsel.coverage(s).sim_t, asym.T)
    np.testing.assert_array_equal(un, asym)  # untouched


@pytest.mark.parametrize("shape", [(5, 5), (4, 9, 9), (70, 70), (3, 130, 130)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_host_pass_masks_converts_and_checks(shape, dtype):
  """The one host pass (checks + copy) against the definition: masks, float64 → float32,
  batches, symmetric or not, and the checks' own errors for NaN, inf and negative entries."""
  rng = np.random.default_rng(shape[-1])
  raw = rng.random(shape).astype(dtype)
  valid = rng.random(shape[:-1]) > 0.3
  for sim in (raw, (raw + np.swapaxes(raw, -1, -2)).astype(dtype)):
    for mask in (None, valid):
      got = np.asarray(jaxsel.coverage(sim, valid=mask).sim_t)
      want = np.swapaxes(sim, -1, -2).astype(np.float32)
      if mask is not None:
        want = want * (mask[..., :, None] & mask[..., None, :])
      assert got.dtype == np.float32
      np.testing.assert_array_equal(got, want)
  index = (0,) * (len(shape) - 2) + (shape[-1] - 1, 1)
  for value, match in ((np.nan, "NaN"), (np.inf, "NaN or infinite"), (-0.5, "nonnegative")):
    for sym in (False, True):
      bad = raw.copy()
      bad[index] = value
      if sym:
        bad = np.minimum(bad, np.swapaxes(bad, -1, -2)) if value < 0 else bad + np.swapaxes(bad, -1, -2)
      with pytest.raises(ValueError, match=match):
        jaxsel.coverage(bad)
      with pytest.raises(ValueError, match=match):
        jaxsel.coverage(jnp.asarray(bad))


@pytest.mark.parametrize("kind", KINDS)
def test_built_inside_jit_equals_built_outside_and_copies_nothing(kind):
  """`jit(vmap(lambda s: greedy(coverage(s))))` on a device array: the kernel reads the
  item-major input as it came (XLA's two transposes fold away: no transpose in the compiled
  program) and picks exactly what the objective built from NumPy picks."""
  b, n = 6, 40
  rng = np.random.default_rng(0)
  sims = rng.random((b, n, n)).astype(np.float32) * (rng.random((b, 1, n)) + 0.2).astype(np.float32)
  rel = rng.random((b, 2, n)).astype(np.float32)
  valid = rng.random((b, n)) > 0.2

  def build(s, r, v):
    if kind == "coverage":
      return jaxsel.coverage(s, valid=v)
    if kind == "facility_location":
      return jaxsel.facility_location(s, r, valid=v)
    return jaxsel.saturated_coverage(s, r, valid=v)

  for v in (None, valid):
    for method in ("lazy", "dense"):
      inside = jax.jit(jax.vmap(lambda s, r, m: jaxsel.greedy(build(s, r, m), k=8, method=method).indices,
                                in_axes=(0, 0, None if v is None else 0)))
      got = inside(jnp.asarray(sims), jnp.asarray(rel), v)
      want = jax.vmap(lambda o: jaxsel.greedy(o, k=8, method=method).indices)(build(sims, rel, v))
      np.testing.assert_array_equal(got, want)
      if v is None:
        hlo = inside.lower(jnp.asarray(sims), jnp.asarray(rel), None).compile().as_text()
        assert "transpose(" not in hlo and "item_major=true" in hlo.replace(" ", "")
  sym = np.stack([_sym(n, seed=s) for s in range(b)])
  one = jax.jit(jax.vmap(lambda s: jaxsel.greedy(build(s, rel[0], None), k=8).indices))(jnp.asarray(sym))
  promised = jax.jit(jax.vmap(lambda s: jaxsel.greedy(
      jaxsel.coverage(s, symmetric=True) if kind == "coverage" else
      jaxsel.facility_location(s, rel[0], symmetric=True) if kind == "facility_location" else
      jaxsel.saturated_coverage(s, rel[0], symmetric=True), k=8).indices))(jnp.asarray(sym))
  np.testing.assert_array_equal(one, promised)


@pytest.mark.parametrize("kind", KINDS)
def test_from_embeddings_greedy_computes_the_matrix_once_where_it_fits(kind):
  """Dense and lazy greedy on a matrix-free objective that fits `max_dense_bytes` compute the
  similarity once and run the native kernel: the same picks as the blocked rows
  (`max_dense_bytes=0`) and as the dense objective on `cosine_similarity`."""
  rng = np.random.default_rng(2)
  emb = rng.normal(size=(90, 12)).astype(np.float32)
  rel = rng.random((2, 90)).astype(np.float32)
  valid = rng.random(90) > 0.1

  def build(**kw):
    if kind == "saturated_coverage":
      return jaxsel.saturated_coverage_from_embeddings(emb, rel, valid=valid, **kw)
    return jaxsel.facility_location_from_embeddings(emb, None if kind == "coverage" else rel,
                                                    valid=valid, **kw)

  sim = np.asarray(jaxsel.cosine_similarity(emb))
  dense, _ = _make(kind, sim, rel, valid)
  for method in ("lazy", "dense"):
    run = jax.jit(lambda o: jaxsel.greedy(o, k=15, method=method))
    once, blocked, want = run(build()), run(build(max_dense_bytes=0)), run(dense)
    np.testing.assert_array_equal(once.indices, blocked.indices)
    np.testing.assert_array_equal(once.indices, want.indices)
    np.testing.assert_allclose(once.values, blocked.values, rtol=1e-5)
  if jax.default_backend() == "cpu":
    assert "jaxsel_cover_greedy" in jax.jit(lambda o: jaxsel.greedy(o, k=3)).lower(build()).as_text()
    assert "jaxsel_cover_greedy" not in jax.jit(lambda o: jaxsel.greedy(o, k=3)).lower(
        build(max_dense_bytes=0)).as_text()
  with pytest.raises(ValueError, match="max_dense_bytes"):
    build(max_dense_bytes=-1)

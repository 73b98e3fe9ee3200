"""The C++ greedy kernels (`jaxsel/_src/native/csrc/greedy.cc`, wrapped by
`jaxsel/_src/objectives/cover_kernel.py`) against the pure-XLA path and brute force.

test_greedy.py runs every greedy test on both paths; here: the kernels are built at install
time and loaded at import (CI has a compiler), nothing is compiled when they are first used,
gains and picks equal the XLA path's, batching rules, the backend argument, and the fallback
where they were not built."""

import heapq
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
import reference as ref
from jaxsel._src import native as _native
from jaxsel._src.objectives import cover_kernel
from instances import _instance


def test_kernel_is_built_and_used():
  """CI has g++: the kernel must load, not fall back silently."""
  sim, rel, valid = _instance(20, seed=0)
  jaxsel.greedy(jaxsel.facility_location(sim, rel, valid=valid), k=3)
  assert _native.available() and _native.status().startswith("loaded"), _native.status()
  assert cover_kernel.applies(jnp.zeros((2, 2), jnp.float32), "auto")
  assert not cover_kernel.applies(jnp.zeros((2, 2), jnp.float32), "xla")
  for kw in (dict(), dict(method="dense"), dict(costs=np.ones(20, np.float32), budget=2.0)):
    for obj in (jaxsel.coverage(sim), jaxsel.saturated_coverage(sim, rel)):
      hlo = jax.jit(lambda o: jaxsel.greedy(o, k=3, **kw)).lower(obj).as_text()
      assert "jaxsel_cover_greedy" in hlo, (kw, type(obj).__name__)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("q", [None, 1, 3])
def test_gains_equal_xla(dtype, q):
  with jax.enable_x64(dtype == jnp.float64):
    rng = np.random.default_rng(3)
    n = 133  # not a multiple of the vector width: the masked tail is exercised
    sim, rel, valid = _instance(n, q=q or 1, seed=4, pad=9)
    obj = jaxsel.facility_location(np.asarray(sim, dtype), None if q is None else np.asarray(rel, dtype),
                                   valid=valid)
    state = obj.update(obj.update(obj.init(), 5), 17)
    idx = jnp.asarray(rng.integers(0, n, 40), jnp.int32)
    native_all, native_idx = obj.gains(state), obj.gains(state, idx)
    assert native_all.dtype == dtype
    xla = obj.with_backend("xla")
    xla_all, xla_idx = xla.gains(state), xla.gains(state, idx)
    tol = 1e-6 if dtype == jnp.float32 else 1e-12
    np.testing.assert_allclose(native_all, xla_all, rtol=tol, atol=tol)
    np.testing.assert_allclose(native_idx, xla_idx, rtol=tol, atol=tol)
    np.testing.assert_array_equal(native_idx, np.asarray(native_all)[np.asarray(idx)])


def _objective(kind, sim, rel, valid):
  if kind == "saturated_coverage":
    return (jaxsel.saturated_coverage(sim, rel, valid=valid),
            lambda m: ref.sc_value(np.asarray(sim), np.asarray(rel), m, np.asarray(valid)))
  return (jaxsel.facility_location(sim, rel, valid=valid),
          lambda m: ref.fl_value(np.asarray(sim), np.asarray(rel), m, np.asarray(valid)))


KINDS = ["facility_location", "saturated_coverage"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", ["dense", "lazy"])
def test_picks_equal_xla_path_and_bruteforce(method, kind):
  sim, rel, valid = _instance(300, q=2, d=12, seed=5, pad=20)
  obj, f = _objective(kind, sim, rel * 0.6, valid)
  native = jaxsel.greedy(obj, k=60, method=method)
  xla = jaxsel.greedy(obj, k=60, method=method, backend="xla")
  np.testing.assert_array_equal(native.indices, xla.indices)
  np.testing.assert_allclose(native.gains, xla.gains, rtol=1e-5)
  np.testing.assert_allclose(native.values, xla.values, rtol=1e-5)
  picks, gains, values = ref.greedy(f, 300, 8, valid=np.asarray(valid))
  np.testing.assert_array_equal(native.indices[:8], picks)
  np.testing.assert_allclose(native.values[:8], values, rtol=1e-5)


def test_vmap_over_min_gain_only_broadcasts_the_objective():
  """`expand_dims` batching: an unbatched objective against a batch of thresholds."""
  sim, rel, valid = _instance(60, seed=6)
  obj = jaxsel.facility_location(sim, rel, valid=valid)
  full = jaxsel.greedy(obj, k=20)
  floors = jnp.asarray([0.0, float(full.gains[3]), float(full.gains[10]), 1e9], jnp.float32)
  for method in ("dense", "lazy"):
    batch = jax.jit(jax.vmap(lambda m: jaxsel.greedy(obj, k=20, min_gain=m, method=method)))(floors)
    for b, m in enumerate(floors):
      one = jaxsel.greedy(obj, k=20, min_gain=m, method=method)
      np.testing.assert_array_equal(batch.indices[b], one.indices)
      assert int(batch.count[b]) == int(one.count)
    assert [int(c) for c in batch.count] == [20, 4, 11, 0]


def test_nested_vmap():
  sims = np.stack([np.stack([_instance(30, seed=10 * a + b)[0] for b in range(3)]) for a in range(2)])
  objs = jax.vmap(jax.vmap(jaxsel.coverage))(jnp.asarray(sims))
  out = jax.vmap(jax.vmap(lambda o: jaxsel.greedy(o, k=5)))(objs)
  for a in range(2):
    for b in range(3):
      np.testing.assert_array_equal(out.indices[a, b], jaxsel.greedy(jaxsel.coverage(sims[a, b]), k=5).indices)


def test_single_large_problem_spreads_steps_over_threads():
  """N² above the per-problem threshold: one problem, the parallel step paths."""
  sim, rel, valid = _instance(700, d=16, seed=7, pad=13)
  obj = jaxsel.facility_location(sim, rel, valid=valid)
  dense, lazy = jaxsel.greedy(obj, k=30, method="dense"), jaxsel.greedy(obj, k=30, method="lazy")
  xla = jaxsel.greedy(obj, k=30, method="dense", backend="xla")
  np.testing.assert_array_equal(dense.indices, xla.indices)
  np.testing.assert_array_equal(lazy.indices, xla.indices)


def _run_python(code: str, cwd, **env):
  """`code` in a fresh interpreter, from `cwd` (not the repository: `python -c` imports from the
  working folder first)."""
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=dict(os.environ, **env), timeout=300, cwd=cwd)
  assert out.returncode == 0, out.stderr[-3000:]
  return out


PICKS = """
    import numpy as np, jaxsel
    from jaxsel._src import native
    x = np.random.default_rng(0).normal(size=(40, 8))
    sel = jaxsel.greedy(jaxsel.coverage(jaxsel.cosine_similarity(x)), k=5)
    print("STATUS", native.status())
    print("PICKS", list(map(int, sel.indices)))
"""


def _expected_picks():
  x = np.random.default_rng(0).normal(size=(40, 8))
  return str(list(map(int, jaxsel.greedy(jaxsel.coverage(jaxsel.cosine_similarity(x)), k=5,
                                         backend="xla").indices)))


def test_first_use_compiles_no_cxx(tmp_path):
  """The kernels were built when jaxsel was installed: with no compiler on PATH at all, the
  first greedy call still runs them."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  os.symlink(sys.executable, bin_dir / "python")
  out = _run_python(PICKS, tmp_path, PATH=str(bin_dir), CXX="false", CC="false")
  assert "STATUS loaded" in out.stdout, out.stdout + out.stderr
  assert out.stdout.split("PICKS ")[1].strip() == _expected_picks()


def test_not_built_falls_back_to_xla_with_one_log_line(tmp_path):
  """A source tree without the built libraries (installed with no compiler): one warning
  that says why, the XLA path, the same picks; `backend='native'` is a clear error."""
  import shutil
  tree = tmp_path / "src"
  shutil.copytree(os.path.dirname(os.path.dirname(jaxsel.__file__)) + "/jaxsel", tree / "jaxsel",
                  ignore=shutil.ignore_patterns("_kernels_*", "__pycache__"))
  out = _run_python(PICKS + """
    sel = jaxsel.greedy(jaxsel.coverage(jaxsel.cosine_similarity(x)), k=4)  # no second warning
    try:
      jaxsel.greedy(jaxsel.coverage(jaxsel.cosine_similarity(x)), k=4, backend="native")
    except ValueError as e:
      print("ERROR", e)
  """, tmp_path, PYTHONPATH=str(tree))
  assert "STATUS not built" in out.stdout
  assert out.stderr.count("native CPU kernels unavailable, using the XLA path") == 1, out.stderr
  assert out.stdout.split("PICKS ")[1].split("\n")[0].strip() == _expected_picks()
  assert "ERROR `backend='native'` but the native kernels are unavailable" in out.stdout


def test_environment_switch_and_backend_argument(tmp_path):
  """`JAXSEL_NATIVE=0` (read at import) makes "auto" the XLA path; `backend=` chooses per call
  and is part of what is compiled (no cache shared between the two)."""
  out = _run_python(PICKS, tmp_path, JAXSEL_NATIVE="0")
  assert "STATUS turned off" in out.stdout
  sim, rel, valid = _instance(50, seed=1)
  obj = jaxsel.facility_location(sim, rel, valid=valid)
  run = jax.jit(lambda o: jaxsel.greedy(o, k=5))
  assert "jaxsel_cover_greedy" in run.lower(obj).as_text()
  assert "jaxsel_cover_greedy" not in run.lower(obj.with_backend("xla")).as_text()
  np.testing.assert_array_equal(run(obj).indices, run(obj.with_backend("xla")).indices)
  with pytest.raises(ValueError, match="Unknown `backend`"):
    jaxsel.greedy(obj, k=3, backend="gpu")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", ["dense", "lazy"])
def test_budgeted_equals_xla_path(method, kind):
  """Costs (some free, some over budget), a batch of budgets, min_gain: native == XLA."""
  sim, rel, valid = _instance(200, q=2, d=10, seed=8, pad=15)
  rng = np.random.default_rng(8)
  costs = rng.integers(0, 40, 200).astype(np.float32)
  costs[:3] = 0  # free candidates: the cost-benefit criterion is +inf for them
  costs[3:6] = 500  # never affordable
  obj, _ = _objective(kind, sim, rel, valid)
  budgets = jnp.asarray([0.0, 35.0, 120.0, 400.0], jnp.float32)
  run = lambda b, m, be: jaxsel.greedy(obj, k=25, costs=costs, budget=b, min_gain=m, method=method,
                                       backend=be)
  for min_gain in (None, 0.05):
    native = jax.jit(jax.vmap(lambda b: run(b, min_gain, "auto")))(budgets)
    xla = jax.jit(jax.vmap(lambda b: run(b, min_gain, "xla")))(budgets)
    np.testing.assert_array_equal(native.indices, xla.indices)
    np.testing.assert_array_equal(native.count, xla.count)
    np.testing.assert_allclose(native.cost, xla.cost, rtol=1e-6)
    np.testing.assert_allclose(native.values, xla.values, rtol=1e-5)
    assert (np.asarray(native.cost) <= np.asarray(budgets)).all()
    picked = np.asarray(native.indices)
    assert not np.isin(picked, [3, 4, 5]).any()


@pytest.mark.parametrize("q", [None, 2])
def test_gains_gradient_equals_xla(q):
  """The kernel has no derivative of its own: reverse mode goes through the XLA sums."""
  sim, rel, valid = _instance(37, q=q or 1, seed=11)
  idx = jnp.asarray([3, 0, 36, 3], jnp.int32)

  def loss(s, r, backend):
    obj = jaxsel.facility_location(s, None if q is None else r, backend=backend)
    state = obj.update(obj.init(), 7)
    return jnp.sum(obj.gains(state) ** 2) + jnp.sum(obj.gains(state, idx))

  native = jax.grad(loss, argnums=(0, 1))(jnp.asarray(sim), jnp.asarray(rel), "auto")
  xla = jax.grad(loss, argnums=(0, 1))(jnp.asarray(sim), jnp.asarray(rel), "xla")
  for a, b in zip(native, xla):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert np.abs(np.asarray(native[0])).sum() > 0


def _direct(n, k, lazy, q=1):
  """Whether the kernel solves item-major problems of this size straight from the input with
  dense steps (greedy.cc: problems solved one per thread, as N²·Q < 2^18 always is, and for
  lazy K <= 16 and N·K <= 2048)."""
  return n * n * q < 2 ** 18 and (not lazy or (k <= 16 and n * k <= 2048))


def _assert_item_major_run(got, lazy_want, dense_want, direct):
  """An item-major run equals the candidate-major one bit for bit; where the kernel takes dense
  steps from the input, lazy greedy returns dense greedy's certificate (not above its own but
  for float rounding: under a budget dense keeps the last gains of what no longer fits)."""
  want = dense_want if direct else lazy_want
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a, b)
  assert (np.asarray(got.bound) <= np.asarray(lazy_want.bound) * (1 + 1e-6)).all()


@pytest.mark.parametrize("saturated", [False, True])
@pytest.mark.parametrize("shape,k", [((600, 600), 12), ((5, 70, 70), 12), ((5, 70, 70), 40), ((6, 150, 150), 16)])
def test_item_major_input_equals_candidate_major(shape, k, saturated):
  """`item_major=True` (how an objective built inside jit hands over its input): one large
  problem (N = 600) is transposed on all threads; a batch of small ones is solved from the
  input with dense steps (every gain at once, each candidate in one vector lane: the same
  sums in the same order), or, for lazy with a larger K·N, transposed in a per-thread scratch.
  The picks, gains and values are the candidate-major ones, bit for bit."""
  rng = np.random.default_rng(shape[-1] + k)
  sim = rng.random(shape).astype(np.float32)
  n = shape[-1]
  rel = rng.random(shape[:-2] + (2, n)).astype(np.float32)
  valid = jnp.asarray(rng.random(shape[:-1]) > 0.1)
  sim_t = jnp.swapaxes(jnp.asarray(sim), -1, -2)
  outs = {}
  for lazy in (False, True):
    run = lambda s, item_major, r, v: cover_kernel.cover_greedy(
        s, r, v, None, jnp.inf, None, k=k, lazy=lazy, ratio=False, saturated=saturated,
        item_major=item_major)
    if len(shape) == 3:
      run = jax.vmap(run, in_axes=(0, None, 0, 0))
    outs[lazy] = (run(sim_t, False, jnp.asarray(rel), valid), run(jnp.asarray(sim), True, jnp.asarray(rel), valid))
  (dense_want, dense_got), (lazy_want, lazy_got) = outs[False], outs[True]
  _assert_item_major_run(dense_got, dense_want, dense_want, True)
  _assert_item_major_run(lazy_got, lazy_want, dense_want, _direct(n, k, True, q=2))
  for a, b in zip(lazy_want[:5], dense_want[:5]):  # lazy equals dense, gains and values too
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["coverage", "weighted", "saturated"])
@pytest.mark.parametrize("n,k", [(1, 1), (17, 5), (33, 16), (100, 10), (129, 7)])
def test_direct_item_major_batch_equals_candidate_major(n, k, kind, dtype):
  """The direct item-major dense steps on every lane layout (N below, at and past the vector
  width, ragged tails, the extra full block of RowGain's layout), with invalid candidates,
  a token budget with and without the cost-benefit ratio, and min_gain: every output of the
  candidate-major dense run, bit for bit (the certificate too), and brute force's picks."""
  with jax.enable_x64(dtype == np.float64):
    _direct_batch_case(n, k, kind, dtype)


def _direct_batch_case(n, k, kind, dtype):
  rng = np.random.default_rng(n * 31 + k)
  b = 5
  sim = rng.random((b, n, n)).astype(dtype)
  valid = rng.random((b, n)) > 0.15
  valid[:, 0] = True
  sim = sim * valid[:, :, None] * valid[:, None, :]  # as the constructors zero
  rel = (rng.random((b, 3, n)) * valid[:, None, :]).astype(dtype) if kind != "coverage" else None
  costs = rng.integers(1, 6, (b, n)).astype(np.float32)
  saturated = kind == "saturated"
  for budget, ratio, floor in ((jnp.inf, False, None), (9.0, True, None), (9.0, False, None), (jnp.inf, False, 0.5)):
    has_costs = budget != jnp.inf
    def run(s, item_major, r, v, c, lazy):
      return cover_kernel.cover_greedy(
          s, r, v, c if has_costs else None, jnp.float32(budget), None if floor is None else jnp.asarray(floor, dtype),
          k=k, lazy=lazy, ratio=ratio, saturated=saturated, item_major=item_major)
    batched = jax.vmap(run, in_axes=(0, None, None if rel is None else 0, 0, 0, None), out_axes=0)
    r = None if rel is None else jnp.asarray(rel)
    sim_t = jnp.swapaxes(jnp.asarray(sim), -1, -2)
    dense_want = batched(sim_t, False, r, jnp.asarray(valid), jnp.asarray(costs), False)
    lazy_want = batched(sim_t, False, r, jnp.asarray(valid), jnp.asarray(costs), True)
    for lazy in (False, True):
      got = batched(jnp.asarray(sim), True, r, jnp.asarray(valid), jnp.asarray(costs), lazy)
      _assert_item_major_run(got, lazy_want if lazy else dense_want, dense_want, _direct(n, k, lazy, q=3))
    if kind == "coverage" and not has_costs and floor is None:
      for i in range(b):
        f = lambda m, i=i: ref.fl_value(sim[i], None, m, valid[i])
        picks, _, _ = ref.greedy(f, n, k, valid=valid[i])
        np.testing.assert_array_equal(np.asarray(got.indices[i])[:len(picks)], picks)


def test_weighted_lazy_and_dense_gains_agree_bit_for_bit():
  """Every native path rounds w·s before subtracting the cover (no fused multiply-add the
  compiler picks for one inlined copy of the gain and not another: setup.py's
  -ffp-contract=off): lazy and dense runs on a batch of weighted problems give the same
  gains and values, not just the same picks."""
  rng = np.random.default_rng(5)
  b, n, k = 8, 60, 12
  sim = rng.random((b, n, n)).astype(np.float32)
  rel = rng.random((b, 3, n)).astype(np.float32)
  objs = jax.vmap(lambda s, r: jaxsel.facility_location(s, r))(sim, rel)
  runs = [jax.jit(jax.vmap(lambda o, m=m: jaxsel.greedy(o, k=k, method=m)))(objs) for m in ("lazy", "dense")]
  for a, b_ in zip(runs[0][:5], runs[1][:5]):
    np.testing.assert_array_equal(a, b_)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4, 37, 37), (3, 8, 8), (2, 5, 5), (203, 203)])
def test_item_major_ragged_sizes_equal_candidate_major(shape, dtype):
  """The kernel's transpose of item-major input (8 x 8 register blocks for float32, the ragged
  edges one by one; row ranges of any offset when one problem spreads over the threads) gives
  the candidate-major run bit for bit, and the picks of brute force."""
  if dtype == np.float64 and not jax.config.jax_enable_x64:
    dtype = np.float32
  rng = np.random.default_rng(sum(shape))
  n = shape[-1]
  keep = rng.random(shape[:-1]) > 0.15
  sim = (rng.random(shape) * keep[..., :, None] * keep[..., None, :]).astype(dtype)  # as the constructors zero
  valid = jnp.asarray(keep)
  run = lambda s, item_major, v: cover_kernel.cover_greedy(
      s, None, v, None, jnp.inf, None, k=4, lazy=True, ratio=False, saturated=False,
      item_major=item_major)
  if len(shape) == 3:
    run = jax.vmap(run, in_axes=(0, None, 0))
  want = run(jnp.swapaxes(jnp.asarray(sim), -1, -2), False, valid)
  got = run(jnp.asarray(sim), True, valid)
  if _direct(n, 4, True):  # dense steps from the input: dense greedy's certificate
    dense = lambda s, v: cover_kernel.cover_greedy(s, None, v, None, jnp.inf, None, k=4, lazy=False,
                                                   ratio=False, saturated=False)
    if len(shape) == 3:
      dense = jax.vmap(dense)
    _assert_item_major_run(got, want, dense(jnp.swapaxes(jnp.asarray(sim), -1, -2), valid), True)
  else:
    for a, b in zip(got, want):
      np.testing.assert_array_equal(a, b)
  for b in range(int(np.prod(shape[:-2], dtype=int))):
    s, v = sim.reshape(-1, n, n)[b], np.asarray(valid).reshape(-1, n)[b]
    picks, _, _ = ref.greedy(lambda m: ref.fl_value(s, None, m, v), n, 4, valid=v)
    np.testing.assert_array_equal(np.asarray(got.indices).reshape(-1, 4)[b][:len(picks)], picks)


def _celf_reference(sim_t, rel, valid, k):
  """Lazy greedy (CELF) in NumPy, float64, ties to the lower index, with the certificate of the
  native lazy kernel: the least over steps of f(S) + the K largest stale bounds of the eligible."""
  n = len(valid)
  cover = np.zeros((rel.shape[0], n))
  gain = lambda j: float(np.maximum(rel[:, j, None] * sim_t[j][None] - cover, 0).sum())
  fresh = np.array([gain(j) if valid[j] else 0.0 for j in range(n)])
  stamp = np.zeros(n, int)
  heap = [(-fresh[j], j) for j in range(n) if valid[j]]
  heapq.heapify(heap)
  eligible = valid.copy()
  picks, value, bound = [], 0.0, np.inf
  for step in range(k):
    best = None
    while heap:
      j = heap[0][1]
      if stamp[j] == step:
        best = j
        break
      fresh[j], stamp[j] = gain(j), step
      heapq.heapreplace(heap, (-fresh[j], j))
    top = np.sort(np.maximum(fresh[eligible], 0))[::-1][:k].sum()
    bound = min(bound, value + top)
    if best is None:
      break
    heapq.heappop(heap)
    cover = np.maximum(cover, rel[:, best, None] * sim_t[best][None])
    value = cover.sum()
    eligible[best] = False
    picks.append(best)
  return picks, bound


@pytest.mark.parametrize("n,k", [(120, 9), (90, 30), (40, 40)])
def test_lazy_certificate_from_the_heap_equals_celf_reference(n, k):
  """Lazy runs without costs take the K largest stale bounds from the CELF heap's top (a walk of
  K entries, not a pass over all N): the bound equals a NumPy CELF's, for K below N, a large K
  (the sorted selection) and K above the valid candidates (every one counted)."""
  sim, rel, valid = _instance(n, q=2, d=6, seed=n, pad=n // 10)
  obj = jaxsel.facility_location(sim, rel, valid=valid)
  s = jaxsel.greedy(obj, k=k, method="lazy")
  picks, bound = _celf_reference(np.asarray(obj.sim_t, np.float64), np.asarray(obj.relevance, np.float64),
                                 np.asarray(valid), k)
  np.testing.assert_array_equal(np.asarray(s.indices)[:len(picks)], picks)
  np.testing.assert_allclose(float(s.bound), bound, rtol=1e-5)
  dense = jaxsel.greedy(obj, k=k, method="dense")
  np.testing.assert_array_equal(s.indices, dense.indices)
  assert float(s.bound) >= float(dense.bound) * (1 - 1e-6)


def _clustered(n, seed):
  """Clipped cosine of clustered embeddings (the bench's data): many stale CELF bounds."""
  rng = np.random.default_rng(seed)
  centres = rng.normal(size=(12, 16))
  x = centres[rng.integers(0, 12, n)] + 0.7 * rng.normal(size=(n, 16))
  return np.asarray(jaxsel.cosine_similarity(x.astype(np.float32))), rng


@pytest.mark.parametrize("case", ["coverage", "weighted", "ratio"])
def test_large_lazy_keeps_celf_picks(case):
  """One large float32 lazy problem (N ≥ 2048, its steps spread over the threads): picks and
  gains equal dense greedy's bit for bit (and the NumPy CELF's / the XLA path's), the
  certificate stays at or above dense greedy's (its stale keys are still upper bounds)."""
  n, k = 2100, 40
  sim, rng = _clustered(n, seed=3)
  valid = np.ones(n, bool)
  valid[rng.choice(n, 37, replace=False)] = False
  rel = rng.random((2, n)).astype(np.float32) if case == "weighted" else None
  obj = jaxsel.facility_location(sim, rel, valid=valid)
  kw = {}
  if case == "ratio":
    kw = dict(costs=rng.integers(1, 30, n).astype(np.float32), budget=200.0)
  lazy = jaxsel.greedy(obj, k=k, method="lazy", **kw)
  dense = jaxsel.greedy(obj, k=k, method="dense", **kw)
  np.testing.assert_array_equal(lazy.indices, dense.indices)
  np.testing.assert_array_equal(lazy.gains, dense.gains)
  np.testing.assert_array_equal(lazy.values, dense.values)
  assert float(lazy.bound) >= float(dense.bound) * (1 - 1e-6)
  assert float(lazy.bound) >= float(lazy.values[int(lazy.count) - 1]) * (1 - 1e-6)
  if case == "ratio":
    xla = jaxsel.greedy(obj, k=k, method="dense", backend="xla", **kw)
    np.testing.assert_array_equal(lazy.indices, xla.indices)
  else:
    r = np.ones((1, n), np.float64) if rel is None else np.asarray(obj.relevance, np.float64)
    picks, _ = _celf_reference(np.asarray(obj.sim_t, np.float64), r, valid, k)
    np.testing.assert_array_equal(np.asarray(lazy.indices)[:len(picks)], picks)


@pytest.mark.parametrize("weighted", [False, True])
def test_lazy_holds_on_rows_of_every_scale(weighted):
  """Lazy greedy on candidate rows of many scales (rows scaled by 0.7-1.4 and by 300,
  subnormal entries beside normal ones, all-zero rows, rows below 2^-100): no stale bound
  falls below a gain, so lazy picks, gains and values equal dense greedy's bit for bit."""
  n, k = 2100, 40
  sim, rng = _clustered(n, seed=5)
  scale = np.ones(n, np.float32)
  rows = rng.permutation(n)
  scale[rows[:1500]] = rng.uniform(0.7, 1.4, 1500)  # three steps, all competitive
  scale[rows[1500:1505]] = 300.0  # largest entry above 255 (picked first)
  scale[rows[1505:1525]] = 0.0
  scale[rows[1525:1545]] = 1e-35
  cand = (sim * scale[:, None]).astype(np.float32)  # candidate-major: row j = candidate j
  tiny = rng.random(cand.shape) < 0.01
  cand[tiny & (scale[:, None] >= 1)] = 1e-42  # subnormal
  rel = rng.uniform(0.9, 1.1, (1, n)).astype(np.float32) if weighted else None
  obj = jaxsel.facility_location(np.ascontiguousarray(cand.T), rel, symmetric=False)
  np.testing.assert_array_equal(obj.sim_t, cand)
  lazy = jaxsel.greedy(obj, k=k, method="lazy")
  dense = jaxsel.greedy(obj, k=k, method="dense")
  np.testing.assert_array_equal(lazy.indices, dense.indices)
  np.testing.assert_array_equal(lazy.gains, dense.gains)
  np.testing.assert_array_equal(lazy.values, dense.values)
  assert float(lazy.bound) >= float(dense.bound) * (1 - 1e-6)

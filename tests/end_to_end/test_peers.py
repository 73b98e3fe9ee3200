"""Peer test: jaxsel greedy facility location against apricot's `FacilityLocationSelection`.

Data: scikit-learn's bundled digits (1797 x 64, non-negative pixels), the example apricot
itself uses. apricot works in float64, jaxsel in float32, so picks must be identical and
gains equal to 1e-4 relative.

Orientation: apricot's precomputed matrix is candidate-major (`X[j, i]` = how well
candidate j covers item i); jaxsel's `similarity[i, j]` is item-major, so a non-symmetric
apricot matrix `X` is `jaxsel.facility_location(X.T)`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import apricot.functions.facilityLocation as apricot_fl
from apricot import FacilityLocationSelection
from sklearn.datasets import load_digits

import jaxsel

K = 100
RTOL = 1e-4
_KERNELS = ("calculate_gains", "calculate_gains_sparse", "calculate_gains_sieve")


@pytest.fixture(scope="module", autouse=True)
def _compile_apricot_kernels_once():
  """apricot re-jits its numba kernels on every `fit` (seconds each); the kernels do not
  depend on the data, so memoise the factories for this module (results are unchanged)."""
  saved = {name: getattr(apricot_fl, name) for name in _KERNELS}
  for name, factory in saved.items():
    setattr(apricot_fl, name, functools.lru_cache(maxsize=None)(factory))
  yield
  for name, factory in saved.items():
    setattr(apricot_fl, name, factory)


@pytest.fixture(scope="module")
def digits():
  return load_digits().data  # [1797, 64] float64


def _apricot(x, optimizer, metric, k=K):
  sel = FacilityLocationSelection(k, metric=metric, optimizer=optimizer).fit(x)
  return np.asarray(sel.ranking), np.asarray(sel.gains)


def _assert_same(selection, ranking, gains):
  idx = np.asarray(selection.indices)
  k = len(ranking)
  first_diff = int(np.argmax(idx[:k] != ranking)) if (idx[:k] != ranking).any() else None
  assert first_diff is None, (
      f"first different pick at step {first_diff}: jaxsel {idx[first_diff]}, apricot "
      f"{ranking[first_diff]}")
  assert int(selection.count) == k
  np.testing.assert_allclose(np.asarray(selection.gains)[:k], gains, rtol=RTOL)
  # The saturation curve is the running sum of apricot's gains.
  np.testing.assert_allclose(np.asarray(selection.values)[:k], np.cumsum(gains), rtol=RTOL)


@pytest.fixture(scope="module")
def cosine_peer(digits):
  """apricot with `metric="cosine"` (similarity = squared cosine), naive and lazy."""
  return {opt: _apricot(digits, opt, "cosine") for opt in ("naive", "lazy")}


@pytest.mark.parametrize("method", ["dense", "lazy"])
@pytest.mark.parametrize("optimizer", ["naive", "lazy"])
def test_cosine_metric_matches_apricot(digits, cosine_peer, optimizer, method):
  sim = jaxsel.cosine_similarity(digits, nonneg="square")
  selection = jaxsel.greedy(jaxsel.facility_location(sim), k=K, method=method)
  _assert_same(selection, *cosine_peer[optimizer])


def test_apricot_naive_and_lazy_agree(cosine_peer):
  # Guards the peer itself: if apricot's two optimizers disagreed (ties), the test above
  # would compare against an ambiguous answer.
  np.testing.assert_array_equal(cosine_peer["naive"][0], cosine_peer["lazy"][0])


@pytest.fixture(scope="module")
def weighted(digits):
  """A non-symmetric precomputed similarity: candidate j's column scaled by a weight r_j,
  i.e. facility location with per-candidate relevance, `f(S) = Σ_i max_{j∈S} r_j s_ij`."""
  sim = np.asarray(jaxsel.cosine_similarity(digits, nonneg="square"), np.float64)
  r = np.random.default_rng(0).uniform(0.2, 1.0, size=sim.shape[0])
  cand_major = r[:, None] * sim.T  # apricot layout: row j = candidate j
  return sim, r, cand_major


@pytest.mark.parametrize("optimizer", ["naive", "lazy"])
def test_precomputed_matches_apricot(digits, cosine_peer, optimizer):
  """The squared-cosine matrix handed to both as a precomputed similarity."""
  sim = np.asarray(jaxsel.cosine_similarity(digits, nonneg="square"))
  ranking, gains = _apricot(sim.astype(np.float64), optimizer, "precomputed")
  np.testing.assert_array_equal(ranking, cosine_peer[optimizer][0])
  selection = jaxsel.greedy(jaxsel.facility_location(sim), k=K, method="lazy")
  _assert_same(selection, ranking, gains)


def test_non_symmetric_precomputed_matches_apricot_naive(weighted):
  """Against apricot's naive greedy only: on this matrix apricot's `LazyGreedy` takes a
  zero-gain item at step 65 while items with gain 0.67 remain (its `gain == best_gain ==
  0.0` shortcut ends the priority-queue scan early), so it is not an exact greedy here."""
  sim, r, cand_major = weighted
  ranking, gains = _apricot(cand_major, "naive", "precomputed")
  assert not np.allclose(cand_major, cand_major.T)  # orientation matters here
  # The same matrix handed over as a precomputed similarity (item-major = transpose) ...
  plain = jaxsel.greedy(jaxsel.facility_location(cand_major.T.astype(np.float32)), k=K, method="lazy")
  _assert_same(plain, ranking, gains)
  # ... and the same objective built from similarity and relevance.
  rel = jaxsel.greedy(jaxsel.facility_location(sim.astype(np.float32), r.astype(np.float32)),
                      k=K, method="dense")
  _assert_same(rel, ranking, gains)


@pytest.fixture(scope="module")
def masked(digits):
  n = digits.shape[0]
  valid = np.ones(n, bool)
  valid[np.random.default_rng(1).choice(n, size=n // 3, replace=False)] = False
  keep = np.flatnonzero(valid)
  sim = jaxsel.cosine_similarity(digits, nonneg="square")
  ranking, gains = _apricot(np.asarray(sim, np.float64)[np.ix_(keep, keep)], "naive", "precomputed")
  return sim, valid, keep[ranking], gains


@pytest.mark.parametrize("method", ["dense", "lazy"])
def test_masked_candidates_match_apricot_on_the_subset(masked, method):
  """Padding with `valid=False` equals running apricot on the valid items only."""
  sim, valid, ranking, gains = masked
  selection = jaxsel.greedy(jaxsel.facility_location(sim, valid=jnp.asarray(valid)), k=K, method=method)
  _assert_same(selection, ranking, gains)


def test_vmapped_batch_matches_apricot_per_row(digits):
  """A batch of different problems (different valid counts) under jit + vmap equals
  apricot run on each one in a Python loop. Naive only: these subsets hold duplicate
  digits with exactly tied gains, which apricot's lazy queue breaks in heap order while
  jaxsel (like apricot's naive greedy) takes the lowest index."""
  rng = np.random.default_rng(2)
  n, b, k = 200, 4, 20
  rows = [rng.choice(digits.shape[0], size=n, replace=False) for _ in range(b)]
  counts = [200, 150, 60, 12]
  sims = np.stack([np.asarray(jaxsel.cosine_similarity(digits[r], nonneg="square")) for r in rows])
  valid = np.arange(n)[None, :] < np.asarray(counts)[:, None]
  objs = jaxsel.facility_location(sims, valid=jnp.asarray(valid))
  batch = jax.jit(jax.vmap(lambda o: jaxsel.greedy(o, k=k, method="lazy")))(objs)
  for i, c in enumerate(counts):
    ranking, gains = _apricot(sims[i, :c, :c].astype(np.float64), "naive", "precomputed", k=min(k, c))
    one = jax.tree.map(lambda x: x[i], batch)
    _assert_same(one, ranking, gains)  # count == min(k, c): all valid items, then stop
    assert (np.asarray(batch.indices[i, min(k, c):]) == jaxsel.NO_ITEM).all()

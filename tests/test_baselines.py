"""Baselines (NaiveRAG, MMR, exhaustive search) against plain Python references."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
from jaxsel._src import baselines
from jaxsel._src.scorers import basic as scorers

N, NUM = 6, 12


def _instances(seed=0):
  rng = np.random.default_rng(seed)
  rel = rng.uniform(0, 1, (NUM, N)).astype(np.float32)
  pair = rng.normal(0, 0.3, (NUM, N, N)).astype(np.float32)
  sim = rng.uniform(0, 1, (NUM, N, N)).astype(np.float32)
  costs = rng.integers(1, 6, (NUM, N)).astype(np.float32)
  budget = rng.integers(3, 12, NUM).astype(np.float32)
  valid = rng.uniform(size=(NUM, N)) < 0.85
  sc = jax.vmap(lambda r, p: scorers.pairwise_scorer(p, unary=r, discount=0.9))(rel, pair)
  return sc, rel, pair, sim, costs, budget, valid


def _value(rel, pair, order):
  o = [int(j) for j in order if j >= 0]
  return sum(0.9 ** t * rel[j] for t, j in enumerate(o)) + sum(
      pair[o[s], o[t]] for t in range(len(o)) for s in range(t))


def _py_fill(crit, costs, budget, valid, depth):
  """Greedy fill by a criterion of (candidate, chosen list); skips chunks that do not fit."""
  chosen, spent = [], 0.0
  while len(chosen) < depth:
    avail = [j for j in range(len(costs))
             if valid[j] and j not in chosen and spent + costs[j] <= budget]
    if not avail:
      break
    j = max(avail, key=lambda j: (crit(j, chosen), -j))
    chosen.append(j)
    spent += costs[j]
  return chosen


@pytest.fixture(scope="module")
def data():
  return _instances()


def test_naive_rag_and_mmr_match_python(data):
  sc, rel, pair, sim, costs, budget, valid = data
  nv = jax.jit(jax.vmap(lambda s, c, b, v: jaxsel.contrib.naive_rag(s, c, budget=b, max_depth=4, valid=v)))(
      sc, costs, budget, valid)
  mm = jax.jit(jax.vmap(lambda s, c, b, v, m: jaxsel.contrib.mmr(
      s, c, budget=b, similarity=m, diversity=0.4, max_depth=4, valid=v)))(sc, costs, budget, valid, sim)
  for i in range(NUM):
    want = _py_fill(lambda j, ch: rel[i, j], costs[i], budget[i], valid[i], 4)
    np.testing.assert_array_equal(nv.order[i], want + [-1] * (4 - len(want)))
    np.testing.assert_allclose(nv.value[i], _value(rel[i], pair[i], want), rtol=1e-5, atol=1e-5)
    assert int(nv.length[i]) == len(want)
    np.testing.assert_allclose(nv.cost[i], costs[i][want].sum())
    # MMR compares a candidate with EVERY chosen chunk (its most similar one).
    want = _py_fill(lambda j, ch: 0.6 * rel[i, j] - 0.4 * max([sim[i, j, s] for s in ch], default=0),
                    costs[i], budget[i], valid[i], 4)
    np.testing.assert_array_equal(mm.order[i], want + [-1] * (4 - len(want)))
    assert costs[i][want].sum() <= budget[i]


def test_mmr_uses_every_chosen_item():
  # After picking 0 then 1, candidate 2 is a near-duplicate of 0 (not of 1, the last pick):
  # MMR against every chosen item prefers 3.
  rel = jnp.array([1.0, 0.9, 0.85, 0.5])
  sim = jnp.array([[1, 0, 0.95, 0], [0, 1, 0, 0], [0.95, 0, 1, 0], [0, 0, 0, 1.0]])
  res = jaxsel.contrib.mmr(scorers.relevance_scorer(rel), jnp.ones(4), budget=3.0, similarity=sim,
                   diversity=0.5)
  np.testing.assert_array_equal(res.order, [0, 1, 3, -1])
  # With diversity 0 it is NaiveRAG.
  res0 = jaxsel.contrib.mmr(scorers.relevance_scorer(rel), jnp.ones(4), budget=3.0, similarity=sim,
                    diversity=0.0)
  np.testing.assert_array_equal(res0.order, [0, 1, 2, -1])


def test_exhaustive_matches_python(data):
  sc, rel, pair, _, costs, budget, valid = data
  ex = jax.jit(jax.vmap(lambda s, c, b, v: jaxsel.contrib.exhaustive_search(
      s, c, budget=b, max_size=3, valid=v, batch_size=50)))(sc, costs, budget, valid)
  for i in range(NUM):
    best, arg = -np.inf, []
    for k in range(1, 4):
      for p in itertools.permutations(range(N), k):
        if valid[i][list(p)].all() and costs[i][list(p)].sum() <= budget[i]:
          v = _value(rel[i], pair[i], p)
          if v > best + 1e-9:
            best, arg = v, list(p)
    np.testing.assert_allclose(ex.value[i], best, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ex.order[i], arg + [-1] * (3 - len(arg)))
    assert ex.cost[i] <= budget[i]


def test_ordered_combinations():
  c = baselines.ordered_combinations(5, 3)
  assert c.shape == (5 + 20 + 60, 3) == (baselines.num_ordered_combinations(5, 3), 3)
  rows = {tuple(int(x) for x in r if x >= 0) for r in c}
  assert len(rows) == len(c)
  assert baselines.num_ordered_combinations(20, 4) == sum(math.perm(20, k) for k in range(1, 5))


def test_empty_and_bad_input():
  sc = scorers.relevance_scorer(jnp.array([1.0, 2.0]))
  for f in (lambda: jaxsel.contrib.naive_rag(sc, jnp.array([3.0, 4.0]), budget=2.0),
            lambda: jaxsel.contrib.exhaustive_search(sc, jnp.array([3.0, 4.0]), budget=2.0, max_size=2),
            lambda: jaxsel.contrib.mmr(sc, jnp.array([3.0, 4.0]), budget=2.0, similarity=jnp.eye(2))):
    res = f()
    assert int(res.length) == 0 and float(res.cost) == 0 and res.tree is None
    np.testing.assert_array_equal(res.order, [-1, -1])
  with pytest.raises(ValueError, match="max_size"):
    jaxsel.contrib.exhaustive_search(scorers.relevance_scorer(jnp.ones(8)), jnp.ones(8), budget=2.0,
                             max_size=6)
  with pytest.raises(ValueError, match="non-negative"):
    jaxsel.contrib.naive_rag(sc, jnp.array([-1.0, 1.0]), budget=2.0)
  with pytest.raises(ValueError, match="similarity"):
    jaxsel.contrib.mmr(sc, jnp.ones(2), budget=2.0, similarity=jnp.eye(3))
  with pytest.raises(ValueError, match="diversity"):
    jaxsel.contrib.mmr(sc, jnp.ones(2), budget=2.0, similarity=jnp.eye(2), diversity=2.0)
  with pytest.raises(ValueError, match="relevance"):
    jaxsel.contrib.naive_rag(sc, jnp.ones(2), budget=2.0, relevance=jnp.ones(3))

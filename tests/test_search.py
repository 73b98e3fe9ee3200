"""CORAG search against the exhaustive optimum, tree invariants, vmap and bad input."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from compiles import CompileCounter

import jaxsel
from jaxsel._src import baselines
from jaxsel._src.scorers import base as scorer_base
from jaxsel._src.scorers import basic as scorers
from jaxsel._src import search

N = 6
DEPTH = 4
NUM = 40  # random instances
ITERS = 30


def _instances(seed=0, num=NUM, n=N):
  """Non-additive scorers: discounted relevance + asymmetric pairwise terms (order effects) +
  a title-link bonus; random costs, budgets and validity masks. Also returns the raw arrays
  for the NumPy reference `_np_value`."""
  rng = np.random.default_rng(seed)
  unary = rng.uniform(0, 1, (num, n)).astype(np.float32)
  pair = rng.normal(0, 0.4, (num, n, n)).astype(np.float32)
  link = (rng.uniform(size=(num, n, n)) < 0.25).astype(np.float32)
  costs = rng.integers(1, 6, (num, n)).astype(np.float32)
  budget = rng.integers(4, 12, num).astype(np.float32)
  valid = rng.uniform(size=(num, n)) < 0.85
  sc = jax.vmap(lambda u, p, l: scorers.pairwise_scorer(p, unary=u, discount=0.8)
                + 0.5 * scorers.link_scorer(l))(unary, pair, link)
  return sc, costs, budget, valid, (unary, pair, link)


def _np_value(raw, i, order):
  """The instances' scorer from its definition, in float64."""
  unary, pair, link = (np.asarray(x[i], np.float64) for x in raw)
  o = [int(j) for j in order if j >= 0]
  v = sum(0.8 ** t * unary[j] for t, j in enumerate(o))
  v += sum(pair[o[s], o[t]] for t in range(len(o)) for s in range(t))
  v += 0.5 * sum(max([link[o[s], o[t]] for s in range(t)], default=0.0) for t in range(len(o)))
  return v


def _brute_force(raw, i, costs, budget, valid, depth):
  """(best value, feasible combination count) over every ordered combination, in NumPy."""
  n = len(costs)
  best, count = -np.inf, 0
  for k in range(1, depth + 1):
    for p in itertools.permutations(range(n), k):
      if costs[list(p)].sum() <= budget and valid[list(p)].all():
        count += 1
        best = max(best, _np_value(raw, i, p))
  return best, count


def _take(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


@pytest.fixture(scope="module")
def batch():
  sc, costs, budget, valid, raw = _instances()
  search = jax.jit(jax.vmap(lambda s, c, b, v: jaxsel.corag_search(
      s, c, budget=b, iterations=ITERS, max_depth=DEPTH, valid=v)))
  res = search(sc, costs, budget, valid)
  exact = jax.jit(jax.vmap(lambda s, c, b, v: jaxsel.contrib.exhaustive_search(
      s, c, budget=b, max_size=DEPTH, valid=v)))(sc, costs, budget, valid)
  return sc, costs, budget, valid, res, exact, raw


def test_reaches_exhaustive_optimum(batch):
  sc, costs, budget, valid, res, exact, raw = batch
  found = np.asarray(res.value)
  opt = np.asarray(exact.value)
  assert (found <= opt + 1e-5).all(), "the search's value can never exceed the optimum"
  hit = np.isclose(found, opt, atol=1e-5)
  assert hit.mean() >= 0.9, f"optimum reached in {hit.mean():.0%} of instances"
  # And the reported value is the scorer's value of the reported order.
  for i in range(NUM):
    assert np.isclose(_np_value(raw, i, res.order[i]), found[i], atol=1e-4)


def test_exhaustive_matches_python_brute_force(batch):
  sc, costs, budget, valid, _, exact, raw = batch
  for i in range(NUM):
    best, _ = _brute_force(raw, i, costs[i], budget[i], valid[i], DEPTH)
    assert np.isclose(float(exact.value[i]), best, atol=1e-4)


def test_budget_and_valid_respected(batch):
  _, costs, budget, valid, res, _, _ = batch
  for i in range(NUM):
    order = np.asarray(res.order[i])
    k = int(res.length[i])
    assert (order[:k] >= 0).all() and (order[k:] == -1).all()
    assert len(set(order[:k])) == k
    assert valid[i][order[:k]].all()
    assert costs[i][order[:k]].sum() <= budget[i]
    assert np.isclose(float(res.cost[i]), costs[i][order[:k]].sum())


def test_tree_invariants(batch):
  _, costs, budget, _, res, _, _ = batch
  for i in range(8):
    t = _take(res.tree, i)
    exists, parent = np.asarray(t.exists), np.asarray(t.parent)
    first, visits = np.asarray(t.first_child), np.asarray(t.visits)
    n_exp = int(t.num_expanded)
    assert visits[0] == 1 + n_exp
    assert (first >= 0).sum() == n_exp
    nodes = np.flatnonzero(exists)
    for v in nodes[1:]:
      p = parent[v]
      assert exists[p] and first[p] >= 0 and first[p] <= v < first[p] + N, "child of an unexpanded node"
      assert t.depth[v] == t.depth[p] + 1
      assert np.isclose(float(t.cost[v]), float(t.cost[p]) + costs[i][int(t.chunk[v])])
      assert float(t.cost[v]) <= budget[i]
    for v in nodes:
      kids = np.asarray(t.children(v))
      kids = kids[kids >= 0]
      if first[v] >= 0:
        # 1 on creation, 1 for its own expansion, and one per expansion below each child.
        assert visits[v] == 2 + (visits[kids] - 1).sum()
      else:
        assert visits[v] == 1 and len(kids) == 0


def test_full_tree_is_exact():
  """With enough iterations the whole tree is built; it then holds every feasible ordered
  combination once and the answer is the optimum in every instance."""
  sc, costs, budget, valid, raw = _instances(seed=1, num=8, n=5)
  res = jax.vmap(lambda s, c, b, v: jaxsel.corag_search(
      s, c, budget=b, iterations=100, max_depth=3, valid=v))(sc, costs, budget, valid)
  for i in range(8):
    best, count = _brute_force(raw, i, costs[i], budget[i], valid[i], 3)
    assert bool(res.tree.exhausted[i, 0])
    assert int(res.tree.exists[i].sum()) - 1 == count
    assert np.isclose(float(res.value[i]), best, atol=1e-4)


def test_vmap_equals_loop_and_deterministic(batch):
  sc, costs, budget, valid, res, _, _ = batch
  for i in (0, 3, 7):
    one = jaxsel.corag_search(_take(sc, i), costs[i], budget=budget[i], iterations=ITERS,
                              max_depth=DEPTH, valid=valid[i])
    again = jaxsel.corag_search(_take(sc, i), costs[i], budget=budget[i], iterations=ITERS,
                                max_depth=DEPTH, valid=valid[i])
    np.testing.assert_array_equal(one.order, res.order[i])
    np.testing.assert_allclose(one.value, res.value[i], rtol=1e-6)
    np.testing.assert_array_equal(one.tree.visits, res.tree.visits[i])
    np.testing.assert_array_equal(one.order, again.order)
    np.testing.assert_array_equal(one.tree.value_sum, again.tree.value_sum)


def test_backup_mean_and_per_query_settings(batch):
  sc, costs, budget, valid, _, exact, raw = batch
  ex = jnp.linspace(0.5, 3.0, NUM)
  lam = jnp.linspace(0.0, 0.5, NUM)
  res = jax.vmap(lambda s, c, b, v, e, l: jaxsel.corag_search(
      s, c, budget=b, iterations=ITERS, max_depth=DEPTH, valid=v, exploration=e, cost_penalty=l,
      backup="mean"))(sc, costs, budget, valid, ex, lam)
  assert (np.asarray(res.value) <= np.asarray(exact.value) + 1e-5).all()
  assert (np.asarray(res.cost) <= budget).all()
  # Backup "max" adds the best new child's value; the root's V is the sum of all rewards.
  t = _take(batch[4].tree, 0)
  assert float(t.value_sum[0]) >= float(t.value[0]) + int(t.num_expanded) * float(
      np.min(np.where(np.asarray(t.exists), np.asarray(t.value), np.inf))) - 1e-4


def test_incremental_scoring_gives_the_same_search(batch):
  """The `append_gains` shortcut and full scoring of every child build the same tree."""
  sc, costs, budget, valid, res, _, _ = batch

  @struct.dataclass
  class Opaque:  # the same scorer without `append_gains`
    inner: scorer_base.Composable

    def __call__(self, order):
      return self.inner(order)

  full = jax.jit(jax.vmap(lambda s, c, b, v: jaxsel.corag_search(
      Opaque(s), c, budget=b, iterations=ITERS, max_depth=DEPTH, valid=v)))(sc, costs, budget, valid)
  np.testing.assert_array_equal(full.order, res.order)
  np.testing.assert_allclose(full.value, res.value, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(full.tree.visits, res.tree.visits)
  np.testing.assert_array_equal(full.tree.exists, res.tree.exists)
  both = np.asarray(res.tree.exists)
  np.testing.assert_allclose(np.asarray(full.tree.value)[both], np.asarray(res.tree.value)[both],
                             rtol=1e-5, atol=1e-5)


def test_normalize_makes_the_search_scale_free(batch):
  """With `normalize=True` the tree depends on the scorer only up to scale: scaling the values
  by a power of two (exact in float) leaves every visit count unchanged; raw values do not."""
  sc, costs, budget, valid, _, exact, _ = batch

  def run(scale, normalize, c):
    return jax.jit(jax.vmap(lambda s, co, b, v: jaxsel.corag_search(
        scale * s, co, budget=b, iterations=ITERS, max_depth=DEPTH, valid=v, exploration=c,
        normalize=normalize)))(sc, costs, budget, valid)

  one = run(1.0, True, 0.5)
  for scale in (0.125, 16.0):
    other = run(scale, True, 0.5)
    np.testing.assert_array_equal(other.order, one.order)
    np.testing.assert_array_equal(other.tree.visits, one.tree.visits)
    np.testing.assert_allclose(other.value, scale * np.asarray(one.value), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(other.utility, one.utility, rtol=1e-4, atol=1e-5)
  raw = [run(scale, False, 0.5).tree.visits for scale in (0.125, 16.0)]
  assert not np.array_equal(raw[0], raw[1])
  # Still the optimum on most instances, never above it.
  found, opt = np.asarray(one.value), np.asarray(exact.value)
  assert (found <= opt + 1e-5).all() and np.isclose(found, opt, atol=1e-5).mean() >= 0.9
  # The range it normalises by: the lowest and highest value of any node.
  t = _take(one.tree, 0)
  vals = np.asarray(t.value)[np.asarray(t.exists)]
  assert float(t.value_min) == vals.min() and float(t.value_max) == vals.max()


def _wide(num=12, n=40, seed=2):
  """Many chunks, few iterations: the case progressive widening is for."""
  sc, costs, budget, valid, _ = _instances(seed=seed, num=num, n=n)
  return sc, costs, budget * 3, valid


def _offered_ranks_hold(tree, widening) -> bool:
  """Every child the descent went into and that is still open ranks, among its open
  siblings by value (ties to the lower index), below ⌈widening·√visits⌉ of its parent: the
  values never change and the open set only shrinks, so the rank it had when chosen bounds it."""
  exists, exhausted = np.asarray(tree.exists), np.asarray(tree.exhausted)
  first, visits, value = np.asarray(tree.first_child), np.asarray(tree.visits), np.asarray(tree.value)
  n = int(tree.num_candidates)
  for v in np.flatnonzero(first >= 0):
    kids = np.arange(first[v], first[v] + n)
    open_ = exists[kids] & ~exhausted[kids]
    width = np.ceil(widening * np.sqrt(visits[v]))
    for j in np.flatnonzero(open_ & (first[kids] >= 0)):
      ahead = open_ & ((value[kids] > value[kids[j]]) | ((value[kids] == value[kids[j]])
                                                        & (np.arange(n) < j)))
      if ahead.sum() >= width:
        return False
  return True


def test_widening_zero_is_the_papers_rule(batch):
  sc, costs, budget, valid, res, _, _ = batch
  zero = jax.jit(jax.vmap(lambda s, c, b, v: jaxsel.corag_search(
      s, c, budget=b, iterations=ITERS, max_depth=DEPTH, valid=v, widening=0.0)))(sc, costs, budget, valid)
  np.testing.assert_array_equal(zero.order, res.order)
  np.testing.assert_array_equal(zero.tree.visits, res.tree.visits)


def test_widening_offers_the_best_children_and_goes_deeper():
  sc, costs, budget, valid = _wide()
  def run(w):
    return jax.jit(jax.vmap(lambda s, c, b, v: jaxsel.corag_search(
        s, c, budget=b, iterations=15, max_depth=DEPTH, valid=v, widening=w, normalize=True,
        exploration=2.0)))(sc, costs, budget, valid)
  paper, wide = run(0.0), run(1.0)
  deep = lambda r: np.asarray(jnp.max(jnp.where(r.tree.exists, r.tree.depth, 0), axis=1))  # noqa: E731
  assert (deep(wide) >= deep(paper)).all() and deep(wide).mean() > deep(paper).mean()
  held = [_offered_ranks_hold(_take(wide.tree, i), 1.0) for i in range(len(costs))]
  assert all(held)
  assert not all(_offered_ranks_hold(_take(paper.tree, i), 1.0) for i in range(len(costs)))
  for i in range(len(costs)):  # the same bookkeeping as the paper's rule
    t = _take(wide.tree, i)
    assert int(t.visits[0]) == 1 + int(t.num_expanded)
    order = np.asarray(wide.order[i])[:int(wide.length[i])]
    assert valid[i][order].all() and costs[i][order].sum() <= budget[i]
  # A per-query C under vmap: each row is its own search.
  mixed = jax.vmap(lambda s, c, b, v, w: jaxsel.corag_search(
      s, c, budget=b, iterations=15, max_depth=DEPTH, valid=v, widening=w, normalize=True,
      exploration=2.0))(sc, costs, budget, valid, jnp.where(jnp.arange(len(costs)) % 2 == 0, 1.0, 0.0))
  np.testing.assert_array_equal(mixed.order[0::2], wide.order[0::2])
  np.testing.assert_array_equal(mixed.order[1::2], paper.order[1::2])


def test_empty_result_when_nothing_fits():
  sc = scorers.relevance_scorer(jnp.array([1.0, 2.0, 3.0]))
  res = jaxsel.corag_search(sc, jnp.array([5.0, 6.0, 7.0]), budget=4.0, iterations=3)
  assert int(res.length) == 0 and float(res.cost) == 0
  np.testing.assert_array_equal(res.order, [-1, -1, -1])
  assert int(res.tree.num_expanded) == 0
  assert float(res.value) == 0.0  # the scorer's value of the empty order


def test_zero_cost_chunks_and_max_depth_one():
  sc = scorers.relevance_scorer(jnp.array([1.0, 3.0, 2.0]))
  res = jaxsel.corag_search(sc, jnp.zeros(3), budget=0.0, iterations=5, max_depth=1)
  np.testing.assert_array_equal(res.order, [1])
  res = jaxsel.corag_search(sc, jnp.zeros(3), budget=0.0, iterations=20)
  assert float(res.value) == 6.0 and int(res.length) == 3


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(costs=[1.0, -1.0, 2.0]), ValueError, "non-negative"),
    (dict(costs=[1.0, float("nan"), 2.0]), ValueError, "NaN"),
    (dict(costs=[[1.0, 1.0, 1.0]]), ValueError, "one instance"),
    (dict(costs=[1.0, 1.0]), ValueError, "N=3"),
    (dict(iterations=0), ValueError, "iterations"),
    (dict(iterations=2.5), TypeError, "iterations"),
    (dict(budget=-1.0), ValueError, "budget"),
    (dict(budget=None), TypeError, "budget"),
    (dict(max_depth=4), ValueError, "max_depth"),
    (dict(max_depth=0), ValueError, "max_depth"),
    (dict(valid=[True, False]), ValueError, "valid"),
    (dict(backup="sum"), ValueError, "backup"),
    (dict(normalize="yes"), TypeError, "normalize"),
    (dict(scorer="nope"), TypeError, "scorer"),
    (dict(widening=-1.0), ValueError, "widening"),
    (dict(widening=[1.0, 2.0]), ValueError, "widening"),
    (dict(widening=float("inf")), ValueError, "widening"),
])
def test_bad_input(kwargs, err, match):
  args = dict(scorer=scorers.relevance_scorer(jnp.ones(3)), costs=[1.0, 1.0, 1.0], budget=2.0,
              iterations=3)
  args.update(kwargs)
  scorer = args.pop("scorer")
  costs = args.pop("costs")
  with pytest.raises(err, match=match):
    jaxsel.corag_search(scorer, costs, **args)


def test_no_candidates():
  with pytest.raises(ValueError, match="N = 0"):
    jaxsel.corag_search(lambda o: jnp.sum(o), jnp.zeros((0,)), budget=1.0, iterations=2)


def test_readme_example_runs():
  """The README's CORAG example runs as written and finds the bridge order."""
  import os
  import re
  path = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")
  section = open(path, encoding="utf-8").read().split("## CORAG search", 1)[1]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  ns = {}
  exec(compile(code, "README.md", "exec"), ns)
  np.testing.assert_array_equal(ns["res"].order, [0, 1, -1])
  np.testing.assert_array_equal(ns["naive"].order, [0, 2, -1])
  assert float(ns["res"].value) > float(ns["naive"].value)
  assert ns["batch"].order.shape == (2, 3)
  assert (np.asarray(ns["batch"].cost) <= np.array([36.0, 20.0])).all()


def _run_isolated(code: str, timeout: float = 240):
  """Runs `code` in a fresh interpreter with a deadline: the regression it guards is a hang."""
  import subprocess
  import sys
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def test_nonfinite_scorer_weights_are_an_error_before_tracing():
  r = jnp.asarray([0.3, 0.9, 0.1, 0.5])
  costs = jnp.asarray([10.0, 20.0, 5.0, 15.0])
  s = scorers.relevance_scorer(r)
  for bad in (jnp.nan * s, jnp.inf * s, jaxsel.weighted_sum([(float("nan"), s)]),
              s + jnp.nan * scorers.link_scorer(jnp.zeros((4, 4)))):
    with pytest.raises(ValueError, match=r"`scorer.*NaN or infinite"):
      search.corag_search(bad, costs, budget=30.0, iterations=4)
    with pytest.raises(ValueError, match=r"`scorer.*NaN or infinite"):
      baselines.naive_rag(bad, costs, budget=30.0)


def test_nonfinite_value_inside_the_search_ends_it():
  """A model scorer may return NaN for some order: under `jit` the search stops there (no
  hang), flags it in `nonfinite` (and `tree.nonfinite`) and answers with the best finite node
  found before; called eagerly it raises instead (see the test below)."""
  proc = _run_isolated("""
import jax, jax.numpy as jnp, numpy as np, jaxsel
r = jnp.asarray([0.3, 0.9, 0.1, 0.5, 0.7])
def scorer(order):  # a plain function; chunk 1 after chunk 3 breaks it
  pos = jnp.arange(order.shape[0])
  has3 = jnp.any(order == 3)
  total = jnp.sum(jnp.where(order >= 0, r[jnp.maximum(order, 0)], 0.0))
  return jnp.where(has3 & jnp.any(order == 1), jnp.nan, total)
search = jax.jit(lambda c: jaxsel.corag_search(scorer, c, budget=30.0, iterations=12))
res = search(jnp.full((5,), 10.0))
print(bool(res.tree.nonfinite), bool(res.nonfinite), np.isfinite(float(res.value)), int(res.length))
nan = lambda o: jnp.nan + 0.0 * o[0]
res = jax.jit(lambda c: jaxsel.corag_search(nan, c, budget=30.0, iterations=5))(jnp.full((5,), 10.0))
print(bool(res.tree.nonfinite), bool(res.nonfinite), int(res.length), int(res.tree.num_expanded))
""")
  assert proc.returncode == 0, proc.stderr[-2000:]
  first, second = proc.stdout.split("\n")[:2]
  assert first.split()[:3] == ["True", "True", "True"]
  assert second.split() == ["True", "True", "0", "0"]


@struct.dataclass
class BrokenScorer:
  """Relevance over 5 chunks whose value is NaN, inf or -inf (`fill` 0, 1, 2) once chunk `bad`
  is in the order (`bad = -1`: every order, the empty one included; `bad = -2`: never). Its
  leaves are finite arrays (a NaN leaf is refused up front), so one compiled program serves
  every variant and a batch of them under `vmap`."""
  bad: jax.Array
  fill: jax.Array
  r = np.asarray([0.3, 0.9, 0.1, 0.5, 0.7], np.float32)

  def __call__(self, order):
    total = jnp.sum(jnp.where(order >= 0, jnp.asarray(self.r)[jnp.maximum(order, 0)], 0.0))
    hit = (self.bad == -1) | jnp.any(order == self.bad)
    return jnp.where(hit, jnp.asarray([np.nan, np.inf, -np.inf])[self.fill], total)


NONFINITE_CALLS = {
    "corag_search": lambda s, c: search.corag_search(s, c, budget=30.0, iterations=12),
    "naive_rag": lambda s, c: baselines.naive_rag(s, c, budget=30.0),
    "mmr": lambda s, c: baselines.mmr(s, c, budget=30.0, similarity=jnp.eye(5)),
    "exhaustive_search": lambda s, c: baselines.exhaustive_search(s, c, budget=30.0, max_size=3),
}


def test_a_nonfinite_scorer_is_an_error_eagerly_and_a_flag_under_a_transform():
  """Issue 20.4: NaN/inf for some orders used to give a worse order silently (NaN everywhere:
  the empty order, value 0.0; naive_rag: value NaN). Eagerly every search and baseline
  raises, naming the scorer; under `jit(vmap)` the broken queries are flagged and the others
  equal the eager result."""
  costs = jnp.full((5,), 10.0)
  variants = [(1, 0), (4, 1), (1, 2), (-1, 0)]  # (bad chunk, NaN / inf / -inf)
  batch = BrokenScorer(bad=jnp.asarray([-2] + [b for b, _ in variants]),
                       fill=jnp.asarray([0] + [f for _, f in variants]))
  for name, call in NONFINITE_CALLS.items():
    for bad, fill in variants:
      with pytest.raises(ValueError, match=rf"scorer `BrokenScorer` returned NaN or infinite "
                                           rf"values in {name}"):
        call(BrokenScorer(bad=jnp.asarray(bad), fill=jnp.asarray(fill)), costs)
    res = jax.jit(jax.vmap(call, in_axes=(0, None)))(batch, costs)
    np.testing.assert_array_equal(res.nonfinite, [False] + [True] * len(variants), err_msg=name)
    ref = call(BrokenScorer(bad=jnp.asarray(-2), fill=jnp.asarray(0)), costs)
    np.testing.assert_array_equal(res.order[0], ref.order, err_msg=name)
    assert float(ref.value) == pytest.approx(0.9 + 0.7 + 0.5), name  # the best 3 (each fits)
    with pytest.raises(ValueError, match=r"for 4 of 5 queries \(first: 1, 2, 3, 4\)"):
      search.raise_if_nonfinite(res.nonfinite, batch, what=name)


def test_sharded_search_checks_the_flag():
  """`sharded_search` (eager, results concrete) raises for a batch with a broken query."""
  mesh = jax.make_mesh((1,), ("x",))
  r = jnp.asarray([[0.3, 0.9, 0.1, 0.5], [0.2, 0.4, np.inf, 0.1]])
  scorers_ = jax.vmap(lambda x: scorers.relevance_scorer(x))(r)  # leaves traced: no early check
  costs = np.full((2, 4), 10.0, np.float32)
  with pytest.raises(ValueError, match=r"NaN or infinite values in sharded_search for 1 of 2 "
                                       r"queries \(first: 1\)"):
    jaxsel.sharded_search(scorers_, costs, mesh=mesh, budget=30.0, iterations=4)


@pytest.mark.parametrize("returns, kind", [
    (lambda o: jnp.ones(o.shape[0]), r"array of shape \([234],\)"),
    (lambda o: jnp.ones(1), r"array of shape \(1,\)"),
    (lambda o: 1.0, "float 1.0"),
    (lambda o: None, "NoneType None"),
    (lambda o: jnp.bool_(True), "dtype bool"),
])
def test_a_scorer_of_the_wrong_kind_is_a_clear_error(returns, kind):
  """Issue 20.5: a vector, a Python float or None used to fail with "Cannot broadcast" or
  "'float' object has no attribute 'astype'"; now a TypeError names the scorer and what it
  must return, raised while tracing: the second time round nothing is compiled (the first
  compiles only the argument checks' small eager operations)."""
  def wrong_scorer(order):
    return returns(order)
  costs = jnp.full((4,), 10.0)
  match = rf"scorer `wrong_scorer` returned .*{kind}.*scalar float array"
  calls = (lambda: search.corag_search(wrong_scorer, costs, budget=30.0, iterations=3),
           lambda: baselines.naive_rag(wrong_scorer, costs, budget=30.0),
           lambda: baselines.naive_rag(wrong_scorer, costs, budget=30.0, relevance=jnp.ones(4)),
           lambda: baselines.mmr(wrong_scorer, costs, budget=30.0, similarity=jnp.eye(4)),
           lambda: baselines.exhaustive_search(wrong_scorer, costs, budget=30.0, max_size=2),
           lambda: jax.vmap(lambda c: search.corag_search(wrong_scorer, c, budget=30.0,
                                                          iterations=3))(costs[None]))
  for round_ in range(2):
    with CompileCounter() as cc:
      for call in calls:
        with pytest.raises(TypeError, match=match):
          call()
  assert cc.count == 0


def test_append_gains_of_the_wrong_shape_is_a_clear_error():
  @struct.dataclass
  class BadGains:
    r: jax.Array

    def __call__(self, order):
      return jnp.sum(jnp.where(order >= 0, self.r[jnp.maximum(order, 0)], 0.0))

    def append_gains(self, order):
      return self.r[:2]
  with pytest.raises(TypeError, match=r"BadGains.append_gains\(order\)` must return \[N\] = \[4\]"):
    search.corag_search(BadGains(jnp.ones(4)), jnp.full((4,), 10.0), budget=30.0, iterations=3)


def test_any_callable_is_a_scorer():
  """A plain function or closure is a scorer (its non-array leaves are static under jit)."""
  rng = np.random.default_rng(5)
  r = jnp.asarray(rng.random(7), jnp.float32)
  costs = jnp.asarray(rng.integers(5, 20, 7), jnp.float32)
  w = jnp.asarray(0.8 ** np.arange(7), jnp.float32)

  def closure(order):
    return jnp.sum(jnp.where(order >= 0, w * r[jnp.maximum(order, 0)], 0.0))

  ref = search.corag_search(scorers.relevance_scorer(r, discount=0.8), costs, budget=40.0,
                            iterations=8)
  for scorer in (closure, lambda order: closure(order)):
    got = search.corag_search(scorer, costs, budget=40.0, iterations=8)
    np.testing.assert_array_equal(got.order, ref.order)
    np.testing.assert_allclose(got.value, ref.value, rtol=1e-6)
    naive = baselines.naive_rag(scorer, costs, budget=40.0, relevance=r)
    np.testing.assert_array_equal(
        naive.order, baselines.naive_rag(scorers.relevance_scorer(r, discount=0.8), costs,
                                         budget=40.0, relevance=r).order)
  # A pytree holding a callable next to arrays: the arrays are traced, the callable static.
  mixed = {"f": lambda order, x: closure(order) * x, "x": jnp.asarray(2.0)}
  ref = search.corag_search(closure, costs, budget=40.0, iterations=8, normalize=True)
  got = search.corag_search(lambda o: mixed["f"](o, mixed["x"]), costs, budget=40.0,
                            iterations=8, normalize=True)  # scale-free: the same tree
  np.testing.assert_array_equal(got.order, ref.order)
  np.testing.assert_allclose(got.value, 2 * ref.value, rtol=1e-6)


def test_a_batch_of_scorers_compiles_once():
  """`vmap(corag_search)` over a batch of scorers, called eagerly again with new values of the
  same shapes, compiles nothing (the search is one jit-compiled program per shape)."""
  counter = CompileCounter()

  def run(seed):
    r = np.random.default_rng(seed)
    rel = jnp.asarray(r.random((3, 20)), jnp.float32)
    batch = jax.vmap(jaxsel.relevance_scorer)(rel)
    costs = jnp.asarray(r.integers(20, 60, (3, 20)), jnp.float32)
    found = jax.vmap(lambda s, c: jaxsel.corag_search(s, c, budget=200.0, iterations=8))(batch, costs)
    for i in range(3):  # each problem of the batch is the unbatched search
      one = jaxsel.corag_search(jaxsel.relevance_scorer(rel[i]), costs[i], budget=200.0, iterations=8)
      np.testing.assert_array_equal(np.asarray(found.order[i]), np.asarray(one.order))

  run(0)
  with counter:
    run(1)
  assert counter.count == 0

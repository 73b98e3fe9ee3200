"""CORAG: Monte-Carlo tree search over ordered chunk combinations under a token budget.

Shape legend: N candidate chunks, T = `max_depth` positions, M = `1 + iterations · N` nodes.

The policy tree (Wang et al. 2024, "CORAG", arXiv 2411.00744) has the empty combination at the
root; a child appends one unused chunk to its parent's order. Every iteration

1. descends from the root, at each node to the child of highest utility
   `U(v) = V(v)/N(v) + c · sqrt(ln N(parent) / N(v)) − λ · cost(v)/B`,
   until it reaches a node that has not been expanded. With `normalize=True`, `V(v)/N(v)` is
   first mapped from [lowest, highest value of any node in the tree] to [0, 1] (the min–max
   normalisation of MuZero / `mctx`), the value scale UCT assumes, so that c and λ weigh the
   same against it whatever the scorer's units. With `widening` C (progressive widening,
   Coulom 2007), a node visited N(v) times offers the descent only its ⌈C·√N(v)⌉ best-valued
   children that are not exhausted: with many chunks and few iterations the paper's rule
   visits a new child of the root every iteration (depth ≈ 2), widening spends them deeper;
2. expands that leaf with **all** its children (every unused valid chunk whose cost still fits
   the budget B), scoring them in **one** batched scorer call; each child starts with one
   visit and its own value. A scorer with `append_gains` (the pairwise, link, objective
   scorers and their weighted sums) gives the children's values as the leaf's value plus the
   gain of appending each chunk, O(T·N) instead of N full calls, O(N·T²); the tree's values
   then equal `scorer(order)` up to float rounding (sums in another order);
3. backs a reward up the path to the root: every node on it gains one visit and the reward,
   the best child's value (`backup="max"`, the paper's rule) or the mean of the children's
   values (`backup="mean"`, a smoother estimate when values are noisy).

A node that cannot grow (depth T, or no unused chunk fits) is *exhausted*, and so is a node
whose children are all exhausted; the descent skips exhausted children, so no iteration is
spent re-visiting a finished branch; once the whole tree is built (it has then scored every
ordered combination within the budget and depth, so its answer is exact) the remaining
iterations do nothing.

The answer is the best-valued node anywhere in the tree (every node fits the budget by
construction, so the budget is never exceeded). The empty combination is the answer only when
no single chunk fits. Ties go to the node created first (fewer chunks, lower indices), so the
search is deterministic.

A scorer that returns NaN or ±inf for an order makes the answer meaningless (the best order
may be one it could not score). The search then stops growing the tree and flags the result
(`SearchResult.nonfinite`); `corag_search` called eagerly raises a `ValueError` naming the
scorer, and a caller under `jit` / `vmap` (the Pipeline, `sharded_search`, training) checks
the flag with `raise_if_nonfinite` once the values are concrete.

Everything is fixed-shape arrays in `lax` loops: the children expanded in iteration `i` occupy
the block `1 + i·N … 1 + i·N + N − 1`, slot `j` holding chunk `j` (a non-fitting chunk leaves
its slot empty, `exists = False`). `jax.vmap` the search over a batch of queries.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import checks, numerics, pytree
from jaxsel._src import constraints as cons_lib
from jaxsel._src import tree as tree_lib
from jaxsel._src.base import NO_ITEM, SearchResult
from jaxsel._src.scorers.base import append_gains_of, num_candidates_of
from jaxsel._src.tree import Tree

Array = jax.Array

BACKUPS = ("max", "mean")


# ----------------------------------------------------------------------------- input checks


def check_inputs(scorer, costs, budget, valid, max_depth, *, depth_name="max_depth"):
  """Validates the arguments shared by the search and the baselines (before tracing)."""
  if not callable(scorer):
    raise TypeError(f"`scorer` must be callable as `scorer(order [T]) -> value` (see "
                    f"`jaxsel.scorers`), got {type(scorer).__name__}.")
  _check_scorer_leaves(scorer)
  if budget is None:
    raise TypeError("`budget` is required (the token budget B).")
  costs, budget = checks.costs_and_budget(costs, budget,
                                          batch="one instance; `jax.vmap` over queries")
  n = costs.shape[0]
  if n == 0:
    raise ValueError("There are no candidates (N = 0): pass at least one chunk (pad with "
                     "`valid=False` entries to keep shapes fixed across queries).")
  sn = num_candidates_of(scorer)
  if sn is not None and sn != n:
    raise ValueError(f"`scorer` is built for N={sn} chunks but `costs` has N={n}.")
  valid = checks.check_valid(valid, n)
  if max_depth is None:
    max_depth = n
  if isinstance(max_depth, bool) or not isinstance(max_depth, (int, np.integer)):
    raise TypeError(f"`{depth_name}` must be a Python int (it fixes the output shape), got {max_depth!r}.")
  max_depth = int(max_depth)
  if not 1 <= max_depth <= n:
    raise ValueError(f"`{depth_name}` must be between 1 and N={n}, got {max_depth}.")
  return costs, budget, valid, max_depth


def _check_scorer_leaves(scorer) -> None:
  """Every concrete float array in the scorer is finite: a NaN weight (`nan * scorer`) would
  make every utility NaN."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(scorer)[0]:
    if isinstance(leaf, (jax.Array, np.ndarray, float)) and checks.is_concrete(leaf):
      x = np.asarray(leaf)
      if jnp.issubdtype(x.dtype, jnp.floating) and x.size and not np.isfinite(x).all():
        raise ValueError(
            f"`scorer{jax.tree_util.keystr(path)}` holds NaN or infinite values; a scorer's "
            "weights and arrays must be finite (check the weights of `weighted_sum` / `w * scorer`).")


def scorer_name(scorer) -> str:
  """A short name for error messages: a function's name, a scorer's class, a registry name."""
  if isinstance(scorer, str):
    return repr(scorer)
  name = getattr(scorer, "__name__", None)
  return f"`{name}`" if isinstance(name, str) else f"`{type(scorer).__name__}`"


def _kind(x) -> str:
  if isinstance(x, (jax.Array, np.ndarray, np.generic)):
    return f"an array of shape {tuple(x.shape)} and dtype {x.dtype}"
  return f"{type(x).__name__} {x!r}" if isinstance(x, (int, float, type(None))) else type(x).__name__


def scorer_value(scorer, order: Array) -> Array:
  """`scorer(order)` for one order `[T]` as a float32 scalar `[]`.

  Anything else than a scalar real array (a vector `[T]` or `[1]`, a Python number, None) is
  a `TypeError` naming the scorer, raised while the caller is traced (before anything is
  compiled); under `vmap` the check sees one order, as the scorer does.
  """
  out = scorer(order)
  ok = isinstance(out, (jax.Array, np.ndarray, np.generic)) and out.shape == () and (
      jnp.issubdtype(out.dtype, jnp.floating) or jnp.issubdtype(out.dtype, jnp.integer))
  if not ok:
    raise TypeError(
        f"The scorer {scorer_name(scorer)} returned {_kind(out)} for one order [T]; a CORAG "
        "scorer must return a scalar float array (shape [], e.g. `jnp.sum(...)`): reduce a "
        "vector to one number, and build a constant with `jnp.asarray(x, jnp.float32)`.")
  return out.astype(jnp.float32)


def score_all(scorer, orders: Array) -> Array:
  """Values `[C]` of the orders `[C, T]` (one vmapped scorer call)."""
  return jax.vmap(functools.partial(scorer_value, scorer))(orders)


def raise_if_nonfinite(nonfinite, scorer, *, what: str, rows: Optional[Sequence] = None) -> None:
  """The one error for a scorer that gave NaN or ±inf, from a concrete flag: `nonfinite` `[]` or
  `[B]` (a batch; `rows` names its entries, default 0…B−1). Every caller of the search and
  the baselines under a transform checks its result's flag with this."""
  flags = np.asarray(nonfinite, bool).reshape(-1)
  if not flags.any():
    return
  where = ""
  if np.ndim(nonfinite):
    names = list(range(len(flags))) if rows is None else list(rows)
    bad = [names[i] for i in np.flatnonzero(flags)]
    where = f" for {len(bad)} of {len(flags)} queries (first: {', '.join(map(str, bad[:5]))})"
  raise ValueError(
      f"The scorer {scorer_name(scorer)} returned NaN or infinite values in {what}{where}: "
      "the order it gives would be wrong (the search stops growing its tree there). Check the "
      "scorer (and its model's inputs).")


def checked(result: SearchResult, scorer, *, what: str) -> SearchResult:
  """`result`, after `raise_if_nonfinite` when its values are concrete (an eager call); under
  `jit` / `vmap` the flagged result goes back to the caller, who checks it."""
  if checks.is_concrete(result.nonfinite):
    raise_if_nonfinite(result.nonfinite, scorer, what=what)
  return result


def empty_order(d: int) -> Array:
  return jnp.full((d,), NO_ITEM, jnp.int32)


# ----------------------------------------------------------------------------- the search


def _children_values(scorer, order: Array, leaf_value: Array, depth: Array, n: int) -> Array:
  """Values `[N]` of the leaf's `order` `[T]` with each chunk appended at position `depth`.

  A scorer with `append_gains` (see `jaxsel.Scorer`) gives them as the leaf's value
  plus the gains, O(T·N); any other scorer scores the N child orders in one vmapped call.
  """
  gains = append_gains_of(scorer, order)
  if gains is not None:
    if getattr(gains, "shape", None) != (n,):
      raise TypeError(f"`{type(scorer).__name__}.append_gains(order)` must return [N] = [{n}] "
                      f"(one gain per chunk), got {_kind(gains)}.")
    return leaf_value + gains.astype(jnp.float32)
  ar = jnp.arange(n, dtype=jnp.int32)
  orders = jnp.where(jnp.arange(order.shape[0])[None, :] == depth, ar[:, None], order[None, :])  # [N, T]
  return score_all(scorer, orders)


def _room_after(cons, used: Array, room: Array) -> Array:
  """`[N, N]` bool: row j, the chunks whose group has room once chunk j joins `used`."""
  if cons is None or cons.caps is None:
    return room[None, :]
  counts = jnp.zeros(cons.caps.shape, jnp.int32).at[cons.slot].add(used.astype(jnp.int32))
  same = cons.slot[:, None] == cons.slot[None, :]
  return counts[cons.slot][None, :] + same.astype(jnp.int32) < cons.caps[cons.slot][None, :]


def _widened(open_: Array, values: Array, visits: Array, widening: Array) -> Array:
  """`open_` `[N]` less all but the ⌈widening·√visits⌉ best-`values` open children (ties to
  the lower index); all of them when `widening` is 0."""
  best_first = jnp.argsort(jnp.where(open_, -values, jnp.inf), stable=True)
  rank = jnp.argsort(best_first)  # an open child's place among the open ones
  width = jnp.ceil(widening * jnp.sqrt(visits.astype(jnp.float32)))
  return open_ & ((widening <= 0) | (rank < width))


def _iteration(i, tree: Tree, scorer, costs, budget, valid, exploration, cost_penalty, root_order,
               cons, widening, limit, *, d, backup, normalize):
  n = costs.shape[0]
  p0 = tree.depth[0]  # the pinned chunks the root holds
  m = tree.visits.shape[0]
  active = ~tree.exhausted[0]  # once the whole tree is built, iterations change nothing
  ar = jnp.arange(n, dtype=jnp.int32)
  levels = jnp.arange(d + 1, dtype=jnp.int32)
  value_range = (tree.value_min, tree.value_max) if normalize else None

  # 1. Descent: highest utility among the non-exhausted children, until an unexpanded node.
  # Position writes are one-hot selects (the level is per query under `vmap`, where a scatter
  # would cost more). `others_done[k]`: every child of the level-k node other than the chosen
  # one is exhausted (the backup needs it; the expansion does not change those children).
  def descend(c):
    node, order, used, path, others_done, k = c
    first = tree.first_child[node]
    u = tree_lib.utility(tree_lib.block(tree.value_sum, first, n), tree_lib.block(tree.visits, first, n),
                         tree.visits[node], tree_lib.block(tree.cost, first, n), exploration,
                         cost_penalty, budget, value_range)
    open_ = tree_lib.block(tree.exists, first, n) & ~tree_lib.block(tree.exhausted, first, n)
    offered = open_ if widening is None else _widened(
        open_, tree_lib.block(tree.value, first, n), tree.visits[node], widening)
    j = numerics.first_argmax(jnp.where(offered, u, -jnp.inf))  # XLA:CPU: faster than jnp.argmax
    child = first + j
    return (child, jnp.where(levels[:d] == p0 + k, j, order), used | (ar == j),
            jnp.where(levels == k + 1, child, path),
            jnp.where(levels == k, jnp.all(~open_ | (ar == j)), others_done), k + 1)

  def more(c):  # an expanded node with room below; never more than `limit` (<= T) levels
    return (tree.first_child[c[0]] >= 0) & (p0 + c[5] < limit)

  init = (jnp.zeros((), jnp.int32), root_order, cons_lib.used(root_order, n),
          jnp.where(levels == 0, 0, NO_ITEM), jnp.ones((d + 1,), bool), jnp.zeros((), jnp.int32))
  leaf, order, used, path, others_done, depth = lax.while_loop(more, descend, init)
  # A well-formed tree always reaches an unexpanded node; anything else (NaN utilities from
  # non-finite values) ends the search instead of corrupting the tree.
  active &= (tree.first_child[leaf] < 0) & ~tree.nonfinite

  # 2. Expansion: all fitting children, one batched scorer call.
  child_cost = tree.cost[leaf] + costs  # [N]
  room = cons_lib.room(cons, used)  # children that would break a cap are not expanded
  fits = valid & ~used & (child_cost <= budget) & active & room
  pos = p0 + depth  # the position the children write
  vals = _children_values(scorer, order, tree.value[leaf], pos, n)
  bad = jnp.any(fits & ~jnp.isfinite(vals))  # a model scorer gave NaN/inf: stop here
  fits &= jnp.isfinite(vals)
  child_used = used[None, :] | jnp.eye(n, dtype=bool)
  terminal = (pos + 1 >= limit) | ~tree_lib.can_grow(child_used, child_cost, costs,
                                                 valid & _room_after(cons, used, room), budget)
  # Block `i` belongs to iteration `i`: the index is the (unbatched) loop counter, so under
  # `vmap` these writes stay dynamic-update-slices rather than scatters.
  start = 1 + i * n

  def put(arr, block):
    return lax.dynamic_update_slice(arr, block.astype(arr.dtype), (start,))

  tree = tree.replace(
      parent=put(tree.parent, jnp.where(fits, leaf, NO_ITEM)),
      chunk=put(tree.chunk, ar),
      depth=put(tree.depth, jnp.full((n,), pos + 1)),
      visits=put(tree.visits, fits.astype(jnp.int32)),
      value_sum=put(tree.value_sum, jnp.where(fits, vals, 0)),
      value=put(tree.value, jnp.where(fits, vals, -jnp.inf)),
      cost=put(tree.cost, child_cost),
      exists=put(tree.exists, fits),
      exhausted=put(tree.exhausted, terminal | ~fits),
      value_min=jnp.minimum(tree.value_min, jnp.min(jnp.where(fits, vals, jnp.inf))),
      value_max=jnp.maximum(tree.value_max, jnp.max(jnp.where(fits, vals, -jnp.inf))),
      first_child=tree.first_child.at[leaf].set(jnp.where(active, start, tree.first_child[leaf])),
      num_expanded=tree.num_expanded + active.astype(jnp.int32),
      nonfinite=tree.nonfinite | bad)

  # 3. Backup along the path (`path` holds the root … leaf, -1 after the leaf): at most T + 1
  # nodes, so a scatter beats a mask over all M nodes.
  if backup == "max":
    reward = jnp.max(jnp.where(fits, vals, -jnp.inf))
  else:
    reward = jnp.sum(jnp.where(fits, vals, 0)) / jnp.maximum(jnp.sum(fits), 1)
  dst = jnp.where((path >= 0) & active, path, m)  # out of range: dropped
  # Exhaustion: a path node is done when all its children are: for the leaf, the new ones;
  # for an ancestor, the next path node (newly done) and the others (done already).
  others_done = jnp.where(levels == depth, jnp.all(~fits | terminal), others_done)
  done = jnp.flip(jnp.cumprod(jnp.flip(others_done).astype(jnp.int32))).astype(bool)
  return tree.replace(visits=tree.visits.at[dst].add(1, mode="drop"),
                      value_sum=tree.value_sum.at[dst].add(reward, mode="drop"),
                      exhausted=tree.exhausted.at[dst].set(done, mode="drop"))


@pytree.jit_static_leaves(static_argnames=("iterations", "max_depth", "backup", "normalize"))
def _search(scorer, costs, budget, valid, exploration, cost_penalty, cons, widening, limit, *,
            iterations, max_depth, backup, normalize):
  n = costs.shape[0]
  d = max_depth
  limit = jnp.asarray(d if limit is None else jnp.clip(limit, 0, d), jnp.int32)
  m = 1 + iterations * n
  root_order, p0 = cons_lib.pinned_order(cons, d)
  root_used = cons_lib.used(root_order, n)
  root_cost = jnp.sum(jnp.where(root_used, costs, 0))
  root_value = scorer_value(scorer, root_order)
  root_bad = ~jnp.isfinite(root_value)
  root_value = jnp.where(root_bad, 0.0, root_value)
  root_done = (p0 >= limit) | ~tree_lib.can_grow(root_used, root_cost, costs,
                                             valid & cons_lib.room(cons, root_used), budget)
  tree = Tree(
      parent=jnp.full((m,), NO_ITEM, jnp.int32),
      chunk=jnp.full((m,), NO_ITEM, jnp.int32),
      depth=jnp.zeros((m,), jnp.int32).at[0].set(p0),
      visits=jnp.zeros((m,), jnp.int32).at[0].set(1),
      value_sum=jnp.zeros((m,), jnp.float32).at[0].set(root_value),
      value=jnp.full((m,), -jnp.inf, jnp.float32).at[0].set(root_value),
      cost=jnp.zeros((m,), jnp.float32).at[0].set(root_cost),
      exists=jnp.zeros((m,), bool).at[0].set(True),
      first_child=jnp.full((m,), NO_ITEM, jnp.int32),
      exhausted=jnp.zeros((m,), bool).at[0].set(root_done),
      value_min=root_value,
      value_max=root_value,
      num_expanded=jnp.zeros((), jnp.int32),
      nonfinite=root_bad,
      num_candidates=n)

  step = functools.partial(_iteration, scorer=scorer, costs=costs, budget=budget, valid=valid,
                           exploration=exploration, cost_penalty=cost_penalty,
                           root_order=root_order, cons=cons, widening=widening, limit=limit, d=d,
                           backup=backup,
                           normalize=normalize)
  tree = lax.fori_loop(0, iterations, step, tree)

  # The answer: the best node; the root too when it holds pinned chunks (else only when
  # nothing was created).
  score = jnp.where(tree.exists & ((jnp.arange(m) > 0) | (p0 > 0)), tree.value, -jnp.inf)
  best = jnp.argmax(score).astype(jnp.int32)
  best = jnp.where(score[best] > -jnp.inf, best, 0)
  def walk(_, c):  # leaf to root, writing each node's chunk at its position
    order, node = c
    k = tree.depth[node]
    order = jnp.where(node > 0, order.at[jnp.maximum(k - 1, 0)].set(tree.chunk[node]), order)
    return order, jnp.where(node > 0, tree.parent[node], node)

  order, _ = lax.fori_loop(0, d, walk, (root_order, best))
  parent_visits = jnp.where(best > 0, tree.visits[jnp.maximum(tree.parent[best], 0)], 1)
  utility = tree_lib.utility(tree.value_sum[best], tree.visits[best], parent_visits, tree.cost[best],
                     exploration, cost_penalty, budget,
                     (tree.value_min, tree.value_max) if normalize else None)
  return SearchResult(order=order, length=tree.depth[best], value=tree.value[best],
                      cost=tree.cost[best], utility=utility, tree=tree, nonfinite=tree.nonfinite)


# Bytes per tree node: seven 4-byte and two 1-byte fields, held twice by the loop (in and out).
_NODE_BYTES = 2 * (7 * 4 + 2)


def _check_tree_size(iterations: int, n: int) -> None:
  """Refuses a tree of `1 + iterations · n` nodes that int32 node ids cannot number or that
  cannot fit in memory, before it is allocated."""
  nodes = 1 + iterations * n
  fix = (f"lower `iterations` (the tree holds 1 + iterations · N nodes, N={n}; 5–25 iterations "
         "usually suffice, and once every order within the budget is scored more change nothing)")
  if nodes >= 2**31:
    raise ValueError(f"`iterations`={iterations:,} makes a tree of {nodes:,} nodes, more than "
                     f"int32 node ids can number (2**31 - 1); {fix}.")
  checks.fits(nodes * _NODE_BYTES, "iterations", iterations,
              what=f"a tree of {nodes:,} nodes", fix=fix)


def corag_search(scorer, costs, *, budget, iterations: int, exploration=2.4, cost_penalty=0.1,
                 max_depth: Optional[int] = None, valid=None, backup: str = "max",
                 normalize: bool = False, pinned=None, groups=None,
                 max_per_group=None, widening=None, limit=None) -> SearchResult:
  """CORAG tree search for the best ordered combination of chunks within a token budget.

  Args:
    scorer: `scorer(order [T] int32, -1 padded) -> value` (see `jaxsel.scorers`); a pytree, so
      per-query data pass through `jax.vmap` as leaves.
    costs: `[N]` non-negative cost of each chunk (tokens).
    budget: the token budget B (scalar, may differ per query under `vmap`). If no chunk fits,
      the result is the empty combination (`length = 0`, `order` all -1, `cost = 0`,
      `value` = the scorer's value of the empty order).
    iterations: number of expansions (static); the tree holds `1 + iterations · N` nodes.
      Once every combination within budget and depth is scored, further iterations are no-ops.
    exploration: c in the utility (array-like; may differ per query). The default 2.4 is the
      paper's; on raw values of order 1 with ~15 iterations over ~20 chunks it stays
      breadth-first (depth ≈ 2, 80% of the optimum in `bench/search.py`), where c = 1.0, or
      `normalize=True` with c = 0.5, reaches 98%.
    cost_penalty: λ in the utility, applied to `cost(v) / B`; it steers the descent only: the
      answer is chosen by value.
    max_depth: most chunks in an order, T (static; default N); fixes `order`'s shape `[T]`.
    valid: bool `[N]`; invalid (padded) chunks are never used.
    backup: ``"max"`` (default; the paper: every node on the path receives the best new
      child's value) or ``"mean"`` (the mean of the new children's values).
    normalize: rescale `V(v)/N(v)` in the utility to [0, 1] by the lowest and highest value of
      any node in the tree so far (static; default False, the paper's raw values). Then c and
      λ mean the same for any scorer scale (a cross-encoder's logits or a cosine); c ≈ 0.5
      suits 5–25 iterations (the paper's c ≈ 2.4 explores breadth-first on [0, 1] values).
    pinned, groups, max_per_group: as in `jaxsel.greedy` (checked the same way, with
      `max_depth` in place of k). The root holds the pinned chunks in order (its value is the
      scorer's of that order, its cost theirs), so every order found starts with them; a
      child that would break a group's cap is not expanded. With pinned chunks the root is a
      candidate answer like any node (the pinned alone may score best).
    widening: C of progressive widening (array-like ≥ 0; may differ per query): a node
      visited N(v) times offers the descent its ⌈C·√N(v)⌉ best-valued children that are not
      exhausted (every child is still expanded and scored, and the answer is still the
      best node anywhere). None (default) or 0: all of them, the paper's rule. The Pipeline
      passes its `widening` setting (off by default) on requests of many candidates.
    limit: most chunks in an order as a runtime value (an int array, may differ per query
      under `vmap`; clipped to [pinned count, `max_depth`]): the same search as
      `max_depth=limit` without compiling a program per value (the Pipeline passes `k` so).
      None: `max_depth`.

  Returns:
    `SearchResult(order [T], length, value, cost, utility, tree, nonfinite)`.

  Raises:
    TypeError: the scorer returns anything but a scalar float array for an order.
    ValueError: called eagerly, when the scorer gave NaN or ±inf for an order it was asked
      about (the root or a child that fits). Under `jit` / `vmap` nothing can be raised on a
      value: the search stops growing the tree at that point and returns `nonfinite = True`
      with the best order found before; check it (`search.raise_if_nonfinite` once concrete).
  """
  costs, budget, valid, max_depth = check_inputs(scorer, costs, budget, valid, max_depth)
  iterations = checks.static_int(iterations, "iterations", 1, what="it fixes the tree size")
  _check_tree_size(iterations, costs.shape[0])
  checks.choice(backup, "backup", BACKUPS)
  normalize = checks.static_bool(normalize, "normalize")
  scalars = {"exploration": exploration, "cost_penalty": cost_penalty}
  if widening is not None:
    scalars["widening"] = widening
  for name, x in scalars.items():
    x = scalars[name] = checks.as_float_array(x, name).astype(jnp.float32)
    if x.ndim != 0:
      raise ValueError(f"`{name}` must be a scalar (per query under `vmap`), got shape {x.shape}.")
    checks.check_finite(x, name)
  exploration, cost_penalty, widening = (scalars["exploration"], scalars["cost_penalty"],
                                         scalars.get("widening"))
  if widening is not None and checks.is_concrete(widening) and float(widening) < 0:
    raise ValueError(f"`widening` must be >= 0 (0 or None: every child is offered), got "
                     f"{float(widening)}.")
  cons = cons_lib.check(pinned, groups, max_per_group, n=costs.shape[0], k=max_depth, costs=costs,
                        budget=budget, valid=valid)
  if limit is not None:
    limit = jnp.asarray(limit)
    if limit.ndim != 0 or not jnp.issubdtype(limit.dtype, jnp.integer):
      raise ValueError(f"`limit` must be an integer scalar (per query under `vmap`), got "
                       f"{_kind(limit)}.")
    if checks.is_concrete(limit) and int(limit) < 1:
      raise ValueError(f"`limit` must be at least 1 (the most chunks in an order), got {int(limit)}.")
  res = _search(scorer, costs, budget, valid, exploration, cost_penalty, cons, widening, limit,
                iterations=iterations, max_depth=max_depth, backup=backup, normalize=normalize)
  return checked(res, scorer, what="corag_search")

"""The CORAG policy tree as fixed-shape arrays, and the node utility that steers the descent.

Shape legend: N candidate chunks, M = `1 + iterations · N` nodes.

The children expanded in iteration `i` occupy the block `1 + i·N … 1 + i·N + N − 1`, slot `j`
holding chunk `j` (a chunk that does not fit leaves its slot empty, `exists = False`); empty
references are `NO_ITEM` (-1). `jaxsel._src.search` grows it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxsel._src import pytree
from jaxsel._src.base import NO_ITEM

Array = jax.Array


@pytree.dataclass
class Tree:
  """The policy tree of one search (leading `[B]` axis on every array under `vmap`)."""
  parent: Array  # [M] int32 parent node, -1 for the root and empty slots
  chunk: Array  # [M] int32 chunk the node appends, -1 for the root
  depth: Array  # [M] int32 number of chunks in the node's order (the root's: the pinned)
  visits: Array  # [M] int32 N(v): 1 on creation, +1 per iteration that backs up through v
  value_sum: Array  # [M] float32 V(v): own value on creation + rewards backed up through v
  value: Array  # [M] float32 the scorer's value of the node's order
  cost: Array  # [M] float32 total cost of the node's chunks
  exists: Array  # [M] bool
  first_child: Array  # [M] int32 start of the node's children block, -1 if not expanded
  exhausted: Array  # [M] bool the node's subtree is fully built
  value_min: Array  # [] float32 lowest value of any node (for `normalize`)
  value_max: Array  # [] float32 highest value of any node
  num_expanded: Array  # [] int32 iterations that expanded a node
  nonfinite: Array  # [] bool the scorer gave a NaN or infinite value: the search stopped there
  num_candidates: int = pytree.field(static=True)

  def children(self, node) -> Array:
    """Children of `node`, `[N]` int32, `-1` where chunk j is not a child (or not expanded)."""
    kids = self.first_child[node] + jnp.arange(self.num_candidates, dtype=jnp.int32)
    ok = (self.first_child[node] >= 0) & self.exists[jnp.clip(kids, 0, self.exists.shape[-1] - 1)]
    return jnp.where(ok, kids, NO_ITEM)


def utility(value_sum, visits, parent_visits, cost, exploration, cost_penalty, budget,
             value_range=None):
  """U of nodes; `value_range = (lo, hi)` rescales V/N from [lo, hi] to [0, 1] (`normalize`)."""
  n = jnp.maximum(visits, 1).astype(jnp.float32)
  explore = jnp.sqrt(jnp.log(jnp.maximum(parent_visits, 1).astype(jnp.float32)) / n)
  penalty = jnp.where(budget > 0, cost / jnp.where(budget > 0, budget, 1), 0)
  q = value_sum / n
  if value_range is not None:
    lo, hi = value_range
    spread = hi - lo
    q = jnp.where(spread > 0, (q - lo) / jnp.where(spread > 0, spread, 1), 0)
  return q + exploration * explore - cost_penalty * penalty


def can_grow(used: Array, cost: Array, costs: Array, valid: Array, budget: Array) -> Array:
  """Whether an unused valid chunk still fits: `used` `[..., N]`, `cost` `[...]` -> `[...]`."""
  return jnp.any(valid & ~used & (cost[..., None] + costs <= budget), axis=-1)


def block(arr: Array, first: Array, n: int) -> Array:
  """The children block `arr[first : first + N]` of `arr` `[M]` (one contiguous slice, also
  under `vmap`; `first = -1` reads block 0, which the caller masks)."""
  return lax.dynamic_slice(arr, (first,), (n,))


def search_estimate(tree: Tree, exploration, value_range=None) -> tuple[Array, Array, Array]:
  """What a finished search knows about the optimum: (exhausted `[]` bool, the best value
  found `[]` (its answer's), estimate `[]`).

  `exhausted`: the tree holds every ordered combination within the budget and depth, so its
  best node is the exact optimum of the scorer over them. `estimate`: otherwise the highest
  optimistic value UCT steers by among the nodes still open (not exhausted): the mean value
  backed up through a node plus its exploration term, `V(v)/N(v) + c·sqrt(ln N(parent) / N(v))`
  (in the scorer's units; with `value_range = (lo, hi)`, `normalize`, the term is scaled by
  `hi - lo`), and never below the best value found; the best value when exhausted. It is an
  estimate, not a bound: a scorer is neither monotone nor submodular in general, so an
  unexplored order may score more.
  """
  root = (jnp.arange(tree.exists.shape[-1]) == 0) & (tree.depth[0] == 0)  # pinned: a candidate
  best = jnp.max(jnp.where(tree.exists & ~root, tree.value, -jnp.inf))
  best = jnp.where(best > -jnp.inf, best, tree.value[0])  # the search's answer's value
  exhausted = tree.exhausted[0]
  n = jnp.maximum(tree.visits, 1).astype(jnp.float32)
  parent_visits = jnp.where(tree.parent >= 0, tree.visits[jnp.maximum(tree.parent, 0)], tree.visits)
  explore = jnp.sqrt(jnp.log(jnp.maximum(parent_visits, 1).astype(jnp.float32)) / n)
  scale = 1.0 if value_range is None else value_range[1] - value_range[0]
  ucb = tree.value_sum / n + exploration * scale * explore
  open_ = tree.exists & ~tree.exhausted
  estimate = jnp.maximum(best, jnp.max(jnp.where(open_, ucb, -jnp.inf)))
  return exhausted, best, jnp.where(exhausted, best, estimate)

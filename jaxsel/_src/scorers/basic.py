"""Value functions of ordered chunk combinations, for `jaxsel.corag_search` and the baselines.

Shape legend: N candidate chunks, T positions in an order (the search's `max_depth`).

A scorer is a pytree (a frozen dataclass, `jaxsel._src.pytree`) called as
`scorer(order) -> value`, where `order` is int32 `[T]`: chunk indices in reading order, `-1` after the last one (an all `-1`
order is the empty combination). Scorers are pure and jit-able; the search scores all
children of a node in one `jax.vmap(scorer)` call, and a batch of queries is a batch of
scorers (every array leaf with a leading `[B]` axis) under `jax.vmap`.

Scorers compose (`jaxsel._src.scorers.base`). Which scorer for what:
* `objective_scorer`: a jaxsel objective (facility location, coverage, saturated coverage)
  of the chunks' set, with an optional position discount so that order matters.
* `relevance_scorer` / `pairwise_scorer`: unary relevance with a position discount, plus
  pairwise terms `P[earlier, later]` (redundancy penalties, order effects).
* `link_scorer` (with `title_links`): prefix-conditioned bonus for a chunk whose title
  appears in an earlier chunk, the bridge that multi-hop questions need.
Model scorers (an encoder or cross-encoder over the assembled tokens) are in `scorers.model`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import bridge, checks, pytree
from jaxsel._src.base import Objective
from jaxsel._src.scorers.base import (Composable, check_discount, check_n, discount_at,
                                      discounts, safe_order)

Array = jax.Array


# ----------------------------------------------------------------------------- objective


@pytree.dataclass
class ObjectiveScorer(Composable):
  """Discounted marginal gains of a jaxsel objective along the order:
  `Σ_t discount^t · (f(S_{≤t}) − f(S_{<t}))`; with `discount = 1` this is `f(S)` and the
  order does not matter; with `discount < 1` earlier chunks count more."""
  objective: Objective
  discount: Array  # []

  @property
  def num_candidates(self) -> int:
    return self.objective.num_candidates

  def __call__(self, order: Array) -> Array:
    if order.shape[-1] == 0:
      return jnp.zeros((), self.objective.state_value(self.objective.init()).dtype)
    return self.prefix_values(order)[-1]

  def prefix_values(self, order: Array) -> Array:
    """`[T]` the value of each prefix of `order` (entry t: `self(order[:t + 1])`), in one pass
    over the objective's incremental state (O(T·N) rather than T calls)."""
    used, idx = safe_order(order)
    w = discounts(self.discount, order.shape[-1])

    def step(carry, x):
      state, prev, total = carry
      j, u, wt = x
      new = self.objective.update(state, j)
      state = jax.tree.map(lambda a, b: jnp.where(u, a, b), new, state)
      val = self.objective.state_value(state)
      total = total + wt * (val - prev)
      return (state, val, total), total

    s0 = self.objective.init()
    v0 = self.objective.state_value(s0)
    _, values = lax.scan(step, (s0, v0, jnp.zeros((), v0.dtype)), (idx, used, w))
    return values

  def append_gains(self, order: Array) -> Optional[Array]:
    used, idx = safe_order(order)

    def step(state, x):
      j, u = x
      return jax.tree.map(lambda a, b: jnp.where(u, a, b), self.objective.update(state, j), state), None

    state, _ = lax.scan(step, self.objective.init(), (idx, used))
    gains = self.objective.gains(state)
    return discount_at(self.discount, used, gains.dtype) * gains


def objective_scorer(objective, *, discount: float = 1.0) -> ObjectiveScorer:
  """Scores an order by the objective's value of its set (see `ObjectiveScorer`).

  `discount` in (0, 1]: weight of the t-th chunk's marginal gain is `discount^t`.
  """
  if not isinstance(objective, Objective):
    raise TypeError(f"`objective` must be a jaxsel objective (e.g. `jaxsel.facility_location`), "
                    f"got {type(objective).__name__}.")
  return ObjectiveScorer(objective=objective, discount=check_discount(discount))


# ----------------------------------------------------------------------------- pairwise


@pytree.dataclass
class PairwiseScorer(Composable):
  """`Σ_t discount^t · unary[o_t] + Σ_{s<t} pairwise[o_s, o_t]`: unary relevance with a
  position discount plus a term for every ordered pair (earlier, later)."""
  unary: Array  # [N]
  pairwise: Optional[Array]  # [N, N] or None
  discount: Array  # []

  @property
  def num_candidates(self) -> int:
    return self.unary.shape[-1]

  def __call__(self, order: Array) -> Array:
    used, idx = safe_order(order)
    d = order.shape[-1]
    w = discounts(self.discount, d, self.unary.dtype)
    total = jnp.sum(jnp.where(used, w * self.unary[idx], 0))
    if self.pairwise is not None:
      p = self.pairwise[idx[:, None], idx[None, :]]  # [T, T]
      before = jnp.triu(jnp.ones((d, d), bool), k=1) & used[:, None] & used[None, :]
      total = total + jnp.sum(jnp.where(before, p, 0))
    return total

  def append_gains(self, order: Array) -> Array:
    used, idx = safe_order(order)
    gains = discount_at(self.discount, used, self.unary.dtype) * self.unary
    if self.pairwise is not None:
      gains = gains + jnp.sum(jnp.where(used[:, None], self.pairwise[idx], 0), axis=0)  # [T, N] rows
    return gains


def pairwise_scorer(pairwise=None, *, unary=None, discount: float = 1.0) -> PairwiseScorer:
  """`unary` `[N]` (default 0) with weights `discount^t` by position, plus `pairwise` `[N, N]`
  summed over ordered pairs `(earlier, later)`; an asymmetric `pairwise` makes order matter,
  a negative similarity matrix penalises redundancy."""
  if pairwise is None and unary is None:
    raise TypeError("Pass `pairwise` [N, N], `unary` [N], or both.")
  if pairwise is not None:
    pairwise = checks.as_float_array(pairwise, "pairwise")
    if pairwise.ndim < 2 or pairwise.shape[-1] != pairwise.shape[-2]:
      raise ValueError(f"`pairwise` must be square [N, N], got shape {pairwise.shape}.")
    checks.check_finite(pairwise, "pairwise")
  if unary is None:
    unary = jnp.zeros(pairwise.shape[:-1], pairwise.dtype)
  unary = checks.as_float_array(unary, "unary")
  if unary.ndim < 1:
    raise ValueError(f"`unary` must be [N], got shape {unary.shape}.")
  checks.check_finite(unary, "unary")
  if pairwise is not None:
    check_n(unary.shape[-1], pairwise, "pairwise")
  return PairwiseScorer(unary=unary, pairwise=pairwise, discount=check_discount(discount))


def relevance_scorer(relevance, *, discount: float = 1.0) -> PairwiseScorer:
  """Additive relevance `Σ_t discount^t · relevance[o_t]`, `relevance` `[N]` (e.g. query–chunk
  cosine). The search and `naive_rag` agree on it; add other scorers for interactions."""
  return pairwise_scorer(None, unary=relevance, discount=discount)


# ----------------------------------------------------------------------------- links


@pytree.dataclass
class LinkScorer(Composable):
  """Prefix-conditioned bonus: chunk `o_t` earns `max_{s<t} link[o_s, o_t] · source[o_s]`.

  With `link = title_links(texts, titles)`, a chunk earns the bonus when its title appears in a
  chunk read before it: the second hop of a multi-hop question, which need not resemble the
  query. `source` (default 1) weights the linking chunk, e.g. by its relevance, so that a
  chain of irrelevant chunks earns nothing.
  """
  link: Array  # [N, N] link[i, j]: chunk j is referenced by chunk i
  source: Array  # [N]

  @property
  def num_candidates(self) -> int:
    return self.link.shape[-1]

  def __call__(self, order: Array) -> Array:
    used, idx = safe_order(order)
    d = order.shape[-1]
    p = self.link[idx[:, None], idx[None, :]] * self.source[idx][:, None]  # [T(s), T(t)]
    before = jnp.triu(jnp.ones((d, d), bool), k=1) & used[:, None] & used[None, :]
    bonus = jnp.max(jnp.where(before, p, 0), axis=0, initial=0)
    return jnp.sum(bonus)

  def append_gains(self, order: Array) -> Array:
    used, idx = safe_order(order)
    p = self.link[idx] * self.source[idx][:, None]  # [T, N]: from each chunk read so far
    return jnp.max(jnp.where(used[:, None], p, 0), axis=0, initial=0)


def link_scorer(link, *, source=None) -> LinkScorer:
  """See `LinkScorer`. `link` `[N, N]` non-negative (1 = link), `source` `[N]` (default 1)."""
  link = checks.as_float_array(link, "link")
  if link.ndim < 2 or link.shape[-1] != link.shape[-2]:
    raise ValueError(f"`link` must be square [N, N], got shape {link.shape}.")
  checks.check_finite(link, "link")
  checks.check_nonnegative(link, "link", "A link is 1 (or a weight ≥ 0) where chunk i names chunk j.")
  if source is None:
    source = jnp.ones(link.shape[:-1], link.dtype)
  source = checks.as_float_array(source, "source")
  check_n(link.shape[-1], source, "source")
  checks.check_finite(source, "source")
  return LinkScorer(link=link, source=source)


def title_links(texts: Sequence[str], titles: Sequence[str], *, case_sensitive: bool = False,
                strip_parenthetical: bool = True, min_chars: int = 3) -> np.ndarray:
  """Link matrix `[N, N]` float32: `link[i, j] = 1` where chunk j's title occurs in chunk i's text.

  Plain Python, outside jit. The title must occur as whole words (`"Paris"` does not match
  `"Parisian"`); a trailing parenthetical disambiguator is dropped first (`"Ed Wood (film)"`
  matches `"Ed Wood"`) unless `strip_parenthetical=False`. Chunks of the same title (pieces of
  one document) never link to each other, nor does a chunk to itself; titles shorter than
  `min_chars` characters link to nothing. Any key phrase per chunk can stand in for `titles`.
  """
  texts, titles = list(texts), list(titles)
  if len(texts) != len(titles):
    raise ValueError(f"`texts` and `titles` must have the same length, got {len(texts)} and {len(titles)}.")
  n = len(texts)
  norm = [bridge.strip_parenthetical(t) if strip_parenthetical else " ".join(t.split())
          for t in titles]
  link = np.zeros((n, n), np.float32)
  for j, t in enumerate(norm):
    if len(t) < min_chars:
      continue
    pat = bridge.whole_words(t, case_sensitive=case_sensitive)
    for i, text in enumerate(texts):
      if i != j and norm[i] != t and pat.search(text):
        link[i, j] = 1.0
  return link

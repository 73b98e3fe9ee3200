"""What every scorer shares: arithmetic (`a + b`, `w * a`, `weighted_sum`) and small helpers.

Shape legend: N candidate chunks, T positions in an order, S terms of a weighted sum.

A scorer is any callable `scorer(order [T] int32) -> value` (`jaxsel.Scorer`); jaxsel's own
scorers are frozen pytrees (`jaxsel._src.pytree`) with this mixin, so they combine:
`0.7 * a + 0.3 * b`, `a - b`, `weighted_sum([(0.7, a), (0.3, b)])` are scorers too (their
weights are array leaves, so they can differ per query under `vmap`). A plain function can be
a term of a weighted sum; it is then a static leaf.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from jaxsel._src import checks, pytree

Array = jax.Array


class Composable:
  """Mixin of jaxsel's scorers (each implements `jaxsel.Scorer`): arithmetic that builds
  `WeightedSum`s, and the default `append_gains` (none).

  Subclasses define `__call__(order [T] int32) -> []` and `num_candidates` (N, or None
  when the scorer does not index chunk arrays), and may define `append_gains`.
  """

  def append_gains(self, order: Array) -> Optional[Array]:
    """What appending each chunk adds: `[N]`, entry j = `self(order + [j]) − self(order)`
    (meaningless for a j already in `order`), or None when the scorer has no such shortcut.

    `order` `[T]` holds its chunks first, `-1` after the last one, and has room for one more.
    The search scores a node's N children with one call of this, O(T·N) for the pairwise and
    link scorers, instead of N full calls, O(N·T²); None makes it score every child in full.
    """
    return None

  def _terms(self):
    return [(jnp.asarray(1.0, jnp.float32), self)]

  def __add__(self, other):
    if not callable(other):
      return NotImplemented
    return _combine(self._terms() + terms_of(other))

  def __sub__(self, other):
    if not callable(other):
      return NotImplemented
    return self + (-1.0) * other

  def __mul__(self, w):
    if callable(w):
      return NotImplemented
    return _combine([(jnp.asarray(w, jnp.float32) * v, s) for v, s in self._terms()])

  __rmul__ = __mul__

  def __neg__(self):
    return self * -1.0


@pytree.dataclass
class WeightedSum(Composable):
  """`Σ_i weights[i] · terms[i](order)`. Build with `weighted_sum` or scorer arithmetic."""
  weights: Array  # [S] (or [B, S] for a batch)
  terms: tuple  # S scorers

  @property
  def num_candidates(self) -> Optional[int]:
    ns = {num_candidates_of(t) for t in self.terms} - {None}
    return ns.pop() if ns else None

  def _terms(self):
    return [(self.weights[..., i], t) for i, t in enumerate(self.terms)]

  def __call__(self, order: Array) -> Array:
    vals = jnp.stack([t(order) for t in self.terms], axis=-1)
    return jnp.sum(self.weights * vals, axis=-1)

  def append_gains(self, order: Array) -> Optional[Array]:
    gains = [append_gains_of(t, order) for t in self.terms]
    if any(g is None for g in gains):
      return None
    return jnp.sum(self.weights * jnp.stack(gains, axis=-1), axis=-1)


def _combine(terms) -> WeightedSum:
  ns = {num_candidates_of(s) for _, s in terms} - {None}
  if len(ns) > 1:
    raise ValueError(f"Scorers of different candidate counts N cannot be combined: {sorted(ns)}.")
  return WeightedSum(weights=jnp.stack([jnp.asarray(w, jnp.float32) for w, _ in terms], axis=-1),
                     terms=tuple(s for _, s in terms))


def weighted_sum(terms: Sequence) -> WeightedSum:
  """A scorer that adds `weight · scorer(order)` over `terms`, a sequence of `(weight, scorer)`."""
  terms = list(terms)
  if not terms:
    raise ValueError("`terms` is empty; pass at least one `(weight, scorer)` pair.")
  flat = []
  for t in terms:
    if not (isinstance(t, tuple) and len(t) == 2 and callable(t[1])):
      raise TypeError(f"Each term must be a `(weight, scorer)` pair, got {t!r}.")
    w, s = t
    flat += [(jnp.asarray(w, jnp.float32) * v, x) for v, x in terms_of(s)]
  return _combine(flat)


# ----------------------------------------------------------------------------- helpers


def terms_of(scorer) -> list:
  """`[(weight, scorer), ...]` of a `WeightedSum`, `[(1, scorer)]` of any other callable."""
  if isinstance(scorer, Composable):
    return scorer._terms()
  return [(jnp.asarray(1.0, jnp.float32), scorer)]


def num_candidates_of(scorer) -> Optional[int]:
  """The scorer's optional `num_candidates` (None: it does not say)."""
  return getattr(scorer, "num_candidates", None)


def append_gains_of(scorer, order: Array) -> Optional[Array]:
  """The scorer's optional `append_gains(order)` (see `Composable.append_gains`), or None."""
  fn = getattr(scorer, "append_gains", None)
  return None if fn is None else fn(order)


def safe_order(order: Array):
  """(`used` bool [T], `idx` int32 [T] with -1 replaced by 0) for gathers."""
  order = jnp.asarray(order, jnp.int32)
  used = order >= 0
  return used, jnp.where(used, order, 0)


def discounts(discount, d: int, dtype=jnp.float32) -> Array:
  return jnp.asarray(discount, dtype) ** jnp.arange(d, dtype=dtype)


def discount_at(discount, used: Array, dtype=jnp.float32) -> Array:
  """The weight `discount^t` of the position `t` after the chunks of `used` `[T]`."""
  return jnp.asarray(discount, dtype) ** jnp.sum(used).astype(dtype)


def check_discount(discount) -> Array:
  """The checked position discount: in (0, 1] (NaN fails this test too)."""
  d = checks.as_float_array(discount, "discount").astype(jnp.float32)
  if checks.is_concrete(d) and not bool(((d > 0) & (d <= 1)).all()):
    raise ValueError(f"`discount` must lie in (0, 1] (weight discount^t of position t), got {discount}.")
  return d


def check_n(n_expected, arr, name, axis=-1):
  if arr.shape[axis] != n_expected:
    raise ValueError(f"`{name}` must have N={n_expected} along axis {axis}, got shape {arr.shape}.")

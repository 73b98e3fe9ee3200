"""Constraints on a selection beyond `k` and the budget: pinned candidates and caps per group.

Shape legend: N candidates, P pinned slots, G groups.

`pinned` `[P]` (int, `-1` padded) are picked first, in that order, and count against `k`, the
budget and their group's cap. `groups` `[N]` (int, `-1`: no group) with caps `[G]` allow at
most `caps[g]` picks from group `g` (a partition matroid). Greedy (`jaxsel.greedy`) and the
CORAG search (`jaxsel.corag_search`) take them through `check` at their boundary and then
work on a `Constraints` with fixed shapes, so a batch with its own constraints passes through
`jax.vmap`. Group counts carry one extra slot, `G`, for the ungrouped (`-1`), whose cap is
never reached: no branch on "has a group" inside the loops.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel._src import checks

Array = jax.Array

UNCAPPED = np.iinfo(np.int32).max


class Constraints(NamedTuple):
  """Checked constraints of one instance (a leading `[B]` axis under `vmap`)."""
  pinned: Optional[Array]  # [P] int32 picked first, in order; -1 after the last
  slot: Optional[Array]  # [N] int32 group count slot of each candidate: its group, G if none
  caps: Optional[Array]  # [G + 1] int32 most picks per group; UNCAPPED in slot G


def _int_array(x, name: str) -> Array:
  if x is None or isinstance(x, (str, bytes)):
    raise TypeError(f"`{name}` must be an array of ints, got {type(x).__name__}.")
  try:
    arr = jnp.asarray(x)
  except TypeError as e:
    raise TypeError(f"`{name}` must be an array of ints: {e}") from None
  if arr.size and not jnp.issubdtype(arr.dtype, jnp.integer):
    raise TypeError(f"`{name}` must hold ints (candidate indices or group ids), got dtype {arr.dtype}.")
  return arr.astype(jnp.int32)


def check(pinned, groups, max_per_group, *, n: int, k: Optional[int] = None, costs=None,
          budget=None, valid=None) -> Optional[Constraints]:
  """Validates the constraints at the API boundary (shapes always; values where concrete:
  under `jit` / `vmap` the caller answers for them). None when none is given.

  Refuses (ValueError naming the argument): `pinned` not `[P]`, out of [-1, N), repeated, an
  invalid (padding) candidate, more than `k`, or costing more than the budget; `groups` not
  `[N]` or outside [-1, G); `max_per_group` not a scalar or `[G]`, or negative; pinned picks
  alone over a group's cap. A scalar cap applies to every group, ids in [0, N)."""
  if pinned is None and groups is None and max_per_group is None:
    return None
  if (groups is None) != (max_per_group is None):
    raise ValueError("`groups` and `max_per_group` go together: pass both (a cap per group) or neither.")
  pin = slot = caps = None
  if pinned is not None:
    pin = _int_array(pinned, "pinned")
    if pin.ndim != 1:
      raise ValueError(f"`pinned` must have shape [P] (candidate indices, -1 padded; one instance, "
                       f"`jax.vmap` for a batch), got {pin.shape}.")
    if checks.is_concrete(pin):
      p = np.asarray(pin)
      if ((p < -1) | (p >= n)).any():
        raise ValueError(f"`pinned` holds indices out of range: each must be a candidate in [0, N={n}) "
                         f"or -1 (padding), got {sorted(set(p[(p < -1) | (p >= n)].tolist()))[:5]}.")
      taken = p[p >= 0]
      if len(set(taken.tolist())) != len(taken):
        raise ValueError(f"`pinned` repeats a candidate: {taken.tolist()}.")
      if k is not None and len(taken) > k:
        raise ValueError(f"`pinned` holds {len(taken)} candidates, more than `k`={k} allows.")
      if valid is not None and checks.is_concrete(valid) and not np.asarray(valid)[taken].all():
        raise ValueError(f"`pinned` names candidates that are not valid (padding): "
                         f"{taken[~np.asarray(valid)[taken]].tolist()}.")
      if costs is not None and checks.is_concrete(costs) and checks.is_concrete(budget):
        spent = float(np.asarray(costs, np.float64)[taken].sum())
        if spent > float(budget):
          raise ValueError(f"`pinned` candidates alone cost {spent:g}, over the budget {float(budget):g}.")
  if groups is not None:
    g = _int_array(groups, "groups")
    if g.shape != (n,):
      raise ValueError(f"`groups` must have shape [N] = [{n}] (one group id per candidate, -1 for "
                       f"none; one instance, `jax.vmap` for a batch), got {g.shape}.")
    cap = _int_array(max_per_group, "max_per_group")
    if cap.ndim > 1:
      raise ValueError(f"`max_per_group` must be a scalar or [G] (a cap per group), got shape {cap.shape}.")
    if checks.is_concrete(cap) and (np.asarray(cap) < 0).any():
      raise ValueError(f"`max_per_group` must be non-negative, got {np.asarray(cap).tolist()}.")
    caps = jnp.broadcast_to(cap, (n,)) if cap.ndim == 0 else cap
    num = caps.shape[0]
    if checks.is_concrete(g):
      gv = np.asarray(g)
      bad = (gv < -1) | (gv >= num)
      if bad.any():
        raise ValueError(f"`groups` must hold ids in [0, G={num}) or -1 (no group), got "
                         f"{sorted(set(gv[bad].tolist()))[:5]}.")
    slot = jnp.where(g < 0, num, g)
    caps = jnp.concatenate([caps, jnp.full((1,), UNCAPPED, jnp.int32)])
    if pin is not None and checks.is_concrete(pin) and checks.is_concrete(slot) and checks.is_concrete(caps):
      p = np.asarray(pin)
      counts = np.bincount(np.asarray(slot)[p[p >= 0]], minlength=num + 1)
      over = np.flatnonzero(counts > np.asarray(caps))
      if len(over):
        raise ValueError(f"`pinned` alone breaks `max_per_group`: group {int(over[0])} holds "
                         f"{int(counts[over[0]])} pinned candidates, its cap is {int(np.asarray(caps)[over[0]])}.")
  return Constraints(pin, slot, caps)


def counts0(cons: Optional[Constraints], like: Array) -> Optional[Array]:
  """Zero group counts `[G + 1]` int32 (None without caps), offset by `like` (an int32 `[]`
  that carries a batch's sharding)."""
  if cons is None or cons.caps is None:
    return None
  return jnp.zeros(cons.caps.shape, jnp.int32) + like


def open_(cons: Optional[Constraints], counts: Optional[Array]):
  """`[N]` bool: the candidates whose group has room for one more pick (True without caps)."""
  if cons is None or cons.caps is None:
    return True
  return counts[cons.slot] < cons.caps[cons.slot]


def count(cons: Optional[Constraints], counts: Optional[Array], j: Array, take: Array):
  """The counts after picking `j` (when `take`)."""
  if counts is None:
    return None
  return counts.at[cons.slot[j]].add(take.astype(jnp.int32))


def room(cons, used: Array) -> Array:
  """`[N]` bool: chunks whose group has room beside the chunks in `used` `[N]` (True without caps)."""
  if cons is None or cons.caps is None:
    return jnp.ones(used.shape, bool)
  counts = jnp.zeros(cons.caps.shape, jnp.int32).at[cons.slot].add(used.astype(jnp.int32))
  return counts[cons.slot] < cons.caps[cons.slot]


def used(order: Array, n: int) -> Array:
  """`[N]` bool: the chunks in `order` `[T]` (-1 slots dropped, not wrapped to N - 1)."""
  return jnp.zeros((n,), bool).at[jnp.where(order >= 0, order, n)].set(True, mode="drop")


def pinned_order(cons, d: int) -> tuple[Array, Array]:
  """The pinned as an order `[T]` (in order, -1 after; a search's root) and its length `[]`."""
  if cons is None or cons.pinned is None:
    return jnp.full((d,), -1, jnp.int32), jnp.zeros((), jnp.int32)
  p = cons.pinned
  p = p[jnp.argsort(p < 0, stable=True)]  # the -1 slots last
  p = p[:d] if p.shape[0] >= d else jnp.concatenate([p, jnp.full((d - p.shape[0],), -1, jnp.int32)])
  return p, jnp.sum(p >= 0).astype(jnp.int32)

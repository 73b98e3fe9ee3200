"""Greedy selection over several devices with `jax.sharding` (a `Mesh`, `shard_map`).

Shape legend: B batch, N candidates, K picks, d devices on the sharded mesh axes.

Two kinds of parallelism, both giving the same picks as one device (except candidate-parallel
stochastic greedy when `N` is not a multiple of the device count: its sample depends on the
padded `N`):

* **data parallel** (`sharded_vmap`, `sharded_greedy`, `sharded_search`): a batch of independent problems is
  split along `[B]` over the devices; each device runs `jax.vmap` of the one-instance
  algorithm on its slice, with no communication (a batch that does not divide evenly is
  padded with copies of its last instance, and the copies are dropped);
* **candidate parallel** (`candidate_sharded_greedy`): one large problem whose candidates are
  split over the devices. Each device holds the candidate-side arrays of its `N/d`
  candidates (rows of the similarity, their embeddings or kNN lists) and the whole, small,
  item-side state (`[Q, N]` coverage); it computes the gains of its own candidates, an
  all-gather gives every device all `N` gains, each takes the same global argmax (ties to
  the lowest index, as on one device), and the owner of the pick broadcasts the updated
  state (a `psum` in which the other devices add zeros, so it is exact). `jaxsel.greedy`
  itself runs unchanged on every device on a view of the objective that does this, so
  every method (dense, lazy, stochastic, budgeted, `min_gain`) is available.

Multi-host: build the `Mesh` over `jax.devices()` after `jax.distributed.initialize()` and
call the same functions from every process (see `examples/multihost.py`).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, ClassVar, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from jaxsel._src import checks
from jaxsel._src import pytree
from jaxsel._src.base import Objective, SearchResult, Selection, with_backend
from jaxsel._src.greedy import greedy
from jaxsel._src.search import checked, corag_search

Array = jax.Array
AxisNames = Union[str, Sequence[str], None]

def _mesh_axes(mesh, axis: AxisNames) -> tuple[tuple[str, ...], int]:
  """The mesh axes to shard over (default: all of them) and the number of devices on them."""
  if not isinstance(mesh, Mesh):
    raise TypeError(f"`mesh` must be a `jax.sharding.Mesh` (e.g. `jax.make_mesh((8,), ('x',))`), "
                    f"got {type(mesh).__name__}.")
  axes = tuple(mesh.axis_names) if axis is None else (axis,) if isinstance(axis, str) else tuple(axis)
  unknown = [a for a in axes if a not in mesh.shape]
  if unknown or not axes:
    raise ValueError(f"`axis` must name axes of the mesh {tuple(mesh.axis_names)}, got {axis!r}.")
  return axes, math.prod(mesh.shape[a] for a in axes)


def _spec(axes: tuple[str, ...], position: int = 0) -> P:
  return P(*([None] * position), axes if len(axes) > 1 else axes[0])


def shard_batch(tree, mesh: Mesh, *, axis: AxisNames = None):
  """Places every array of `tree` on the devices of `mesh`, split along its leading `[B]` axis.

  `B` must be a multiple of the number of devices on `axis` (default: all mesh axes); each
  process only transfers the slices of its own devices, so on several hosts every process
  calls this with the same (host-local, whole) arrays.
  """
  axes, d = _mesh_axes(mesh, axis)
  for x in jax.tree.leaves(tree):
    if np.ndim(x) == 0 or np.shape(x)[0] % d:
      raise ValueError(f"`shard_batch` needs a leading batch axis that is a multiple of the {d} "
                       f"devices on {axes}, got shape {np.shape(x)}; pad the batch, or use "
                       "`jaxsel.sharded_vmap`, which pads for you.")
  if jax.process_count() > 1:
    return _global(tree, _spec(axes), mesh)
  return jax.device_put(tree, NamedSharding(mesh, _spec(axes)))


def _place(tree, specs, mesh: Mesh):
  """Inside `jit`: lays `tree` out as `specs` (a prefix tree of `PartitionSpec`s) on `mesh`,
  as `shard_map` expects; `reshard` on meshes with explicit axes (the default of
  `jax.make_mesh`), a sharding constraint on meshes with automatic ones."""
  explicit = any(t == AxisType.Explicit for t in mesh.axis_types)

  def put(spec, x):
    if x is None:
      return None
    sharding = NamedSharding(mesh, spec)
    return jax.reshard(x, sharding) if explicit else lax.with_sharding_constraint(x, sharding)

  def put_all(spec, sub):
    return jax.tree.map(functools.partial(put, spec), sub)

  return jax.tree.map(put_all, specs, tree, is_leaf=lambda s: isinstance(s, P) or s is None)


def _global(tree, specs, mesh: Mesh):
  """With several processes: host-local arrays -> global `jax.Array`s laid out as `specs`.

  A jitted computation over a mesh that spans processes only takes global arrays. Every
  process passes the same whole arrays; each transfers only its own devices' slices. With
  one process this is the identity (`_place` lays the arrays out inside `jit`).
  """
  if jax.process_count() == 1:
    return tree

  def put(spec, x):
    if x is None or (isinstance(x, jax.Array) and not x.is_fully_addressable):
      return x
    sharding = NamedSharding(mesh, spec)
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      data = put(spec, jax.random.key_data(x))
      return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

  def put_all(spec, sub):
    return jax.tree.map(functools.partial(put, spec), sub)

  return jax.tree.map(put_all, specs, tree, is_leaf=lambda s: isinstance(s, P) or s is None)


def _pad_rows(x: Array, rows: int, *, repeat_last: bool, axis: int = 0) -> Array:
  extra = rows - x.shape[axis]
  if extra == 0:
    return x
  if repeat_last:
    last = lax.slice_in_dim(x, x.shape[axis] - 1, x.shape[axis], axis=axis)
    return jnp.concatenate([x, jnp.repeat(last, extra, axis=axis)], axis=axis)
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  return jnp.pad(x, widths)


def sharded_vmap(fn: Callable, *, mesh: Mesh, axis: AxisNames = None) -> Callable:
  """`jax.vmap(fn)` with the batch split over the devices of `mesh` (data parallel).

  Every array in the arguments of the returned function has the same leading batch size
  `[B]`; non-array settings belong in `fn` (`functools.partial`). The result equals
  `jax.vmap(fn)(*args)` computed on one device; each device runs its `B/d` instances with no
  communication. A batch that is not a multiple of the device count is padded with copies
  of its last instance, which are dropped from the result. The returned function is jitted.
  """
  axes, d = _mesh_axes(mesh, axis)
  spec = _spec(axes)

  @jax.jit
  def run_jit(*args):
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree.leaves(args)}
    if len(sizes) != 1 or None in sizes or 0 in sizes:
      raise ValueError(
          "Every array passed to a `sharded_vmap` function needs the same non-empty leading "
          f"batch axis [B], got leading sizes {sorted(map(str, sizes))}; move settings that are "
          "not batched into `fn` with `functools.partial`.")
    b = sizes.pop()
    rows = -(-b // d) * d
    padded = jax.tree.map(lambda x: _pad_rows(x, rows, repeat_last=True), args)
    padded = _place(padded, spec, mesh)
    # No collectives run, so the per-device code is one-device code: `check_vma=False`
    # spares `fn` from marking its loop carries as device-varying.
    out = jax.shard_map(jax.vmap(fn), mesh=mesh, in_specs=spec, out_specs=spec,
                        check_vma=False)(*padded)
    if rows == b:
      return out
    # A sharded axis cannot be cut to a size the devices do not divide: gather, then cut.
    return jax.tree.map(lambda x: x[:b], _place(out, P(), mesh))

  def run(*args):
    return run_jit(*_global(args, P(), mesh))

  return run


def _check_costs(costs, budget) -> None:
  """Value checks `jaxsel.greedy` can only make outside `jit`/`vmap`/`shard_map`."""
  fix = "A cost is e.g. a token count, a budget the total allowed."
  for x, name in ((costs, "costs"), (budget, "budget")):
    if x is not None:
      x = checks.as_float_array(x, name)
      checks.check_finite(x, name)
      checks.check_nonnegative(x, name, fix)


@functools.lru_cache(maxsize=64)
def _batched_greedy(mesh, axes, k, method, epsilon, block):
  def one(obj, costs, budget, min_gain, key):
    return greedy(obj, k=k, costs=costs, budget=budget, min_gain=min_gain, method=method,
                  key=key, epsilon=epsilon, block=block)
  return sharded_vmap(one, mesh=mesh, axis=axes)


def sharded_greedy(objectives, *, mesh: Mesh, k: int, axis: AxisNames = None, costs=None,
                   budget=None, min_gain=None, method: str = "lazy", key=None,
                   epsilon: float = 0.1, block: Optional[int] = None) -> Selection:
  """`jax.vmap(jaxsel.greedy)` over a batch of objectives split over the devices of `mesh`.

  Args:
    objectives: a batch of objectives, every array with a leading `[B]` axis (e.g.
      `jaxsel.facility_location(sim)` with `sim` `[B, N, N]`).
    mesh: the device mesh; `axis` names the mesh axes the batch is split over (default all).
    k, method, epsilon, block: as in `jaxsel.greedy`.
    costs: `[B, N]`; `budget`: `[]` or `[B]` (together, as in `jaxsel.greedy`).
    min_gain: `[]` or `[B]`.
    key: one PRNG key (split into `B` keys, `jax.random.split(key, B)`) or `[B]` keys.

  Returns:
    `Selection` with a leading `[B]` axis, equal to `jax.vmap` of `jaxsel.greedy` with the
    same per-instance keys on one device.
  """
  axes, _ = _mesh_axes(mesh, axis)
  valid = getattr(objectives, "valid", None)
  if valid is None or np.ndim(valid) != 2:
    raise ValueError("`objectives` must be a batch of jaxsel objectives, every array with a "
                     "leading [B] axis (`valid` [B, N]); for one large problem use "
                     "`jaxsel.candidate_sharded_greedy`.")
  b = valid.shape[0]
  _check_costs(costs, budget)

  def per_instance(x, dtype):
    return None if x is None else jnp.broadcast_to(jnp.asarray(x, dtype), (b,))

  budget = per_instance(budget, jnp.float32)
  min_gain = per_instance(min_gain, jnp.float32)
  if key is not None and jnp.ndim(key) == 0:
    key = jax.random.split(key, b)
  run = _batched_greedy(mesh, axes, k, method, epsilon, block)
  return run(objectives, costs, budget, min_gain, key)


@functools.lru_cache(maxsize=64)
def _batched_search(mesh, axes, iterations, max_depth, backup, normalize, widen):
  def one(scorer, costs, budget, valid, exploration, cost_penalty, widening):
    return corag_search(scorer, costs, budget=budget, iterations=iterations,
                        exploration=exploration, cost_penalty=cost_penalty,
                        max_depth=max_depth, valid=valid, backup=backup, normalize=normalize,
                        widening=widening if widen else None)
  return sharded_vmap(one, mesh=mesh, axis=axes)


def sharded_search(scorers, costs, *, mesh: Mesh, budget, iterations: int, axis: AxisNames = None,
                   exploration=2.4, cost_penalty=0.1, max_depth: Optional[int] = None,
                   valid=None, backup: str = "max", normalize: bool = False,
                   widening=None) -> SearchResult:
  """`jax.vmap(jaxsel.corag_search)` over a batch of queries split over the devices of `mesh`.

  Args:
    scorers: a batch of scorers, every array leaf with a leading `[B]` axis (build them
      under `jax.vmap`, see `jaxsel.scorers`).
    costs: `[B, N]` chunk costs; `valid`: bool `[B, N]` (default all valid).
    budget, exploration, cost_penalty, widening: `[]` or `[B]` (`widening` None: none).
    iterations, max_depth, backup, normalize: as in `jaxsel.corag_search` (static, shared).
    mesh, axis: as in `sharded_greedy`.

  Returns:
    `SearchResult` with a leading `[B]` axis, equal to the one-device `jax.vmap`.

  Raises:
    ValueError: a query's scorer gave NaN or ±inf (`SearchResult.nonfinite`; the message names
      the queries), when the result is concrete; under `jit` the caller checks the flag.
  """
  costs = checks.as_float_array(costs, "costs")
  if costs.ndim != 2:
    raise ValueError(f"`costs` must be [B, N] (one row per query), got shape {costs.shape}.")
  b, n = costs.shape
  axes, _ = _mesh_axes(mesh, axis)
  _check_costs(costs, budget)
  valid = checks.check_valid(valid, n, batch_shape=(b,))

  def per_query(x):
    return jnp.broadcast_to(jnp.asarray(x, jnp.float32), (b,))

  run = _batched_search(mesh, axes, iterations, max_depth, backup,
                        checks.static_bool(normalize, "normalize"), widening is not None)
  res = run(scorers, costs, per_query(budget), valid, per_query(exploration),
            per_query(cost_penalty), per_query(0.0 if widening is None else widening))
  return checked(res, scorers, what="sharded_search")


@pytree.dataclass
class _CandidateShard(Objective):
  """The objective as seen by one device under candidate parallelism: `local` holds this
  device's candidates (ids `offset + [0, n_local)`), gains and updates are made global with
  collectives over `axes`. Implements the objective protocol for `jaxsel.greedy`."""
  local: Any
  valid: Array  # [N] bool, all candidates (padded to a multiple of the device count)
  axes: tuple = pytree.field(static=True)
  candidate_axes: ClassVar = {}  # a device's view is never split again

  @property
  def num_candidates(self) -> int:
    return self.valid.shape[-1]

  def _owned(self, j: Array):
    n_local = self.local.valid.shape[-1]
    i = j - lax.axis_index(self.axes) * n_local
    own = (i >= 0) & (i < n_local)
    return jnp.clip(i, 0, n_local - 1), own

  def init(self):
    return self.local.init()

  def gains(self, state, idx: Optional[Array] = None) -> Array:
    if idx is None:
      return lax.all_gather(self.local.gains(state), self.axes, tiled=True, to="invarying")
    i, own = self._owned(idx)
    return lax.psum(jnp.where(own, self.local.gains(state, i), 0), self.axes)

  def update(self, state, j: Array):
    i, own = self._owned(j)
    new = self.local.update(state, i)
    return jax.tree.map(lambda x: lax.psum(jnp.where(own, x, jnp.zeros_like(x)), self.axes), new)

  def state_value(self, state) -> Array:
    return self.local.state_value(state)

  def value(self, selected: Array) -> Array:
    raise NotImplementedError("Evaluate `value` on the whole objective, not on a device's view.")

  def with_backend(self, backend: str):
    return self.replace(local=with_backend(self.local, backend))

  def fused_greedy(self, costs, budget, min_gain, *, k, lazy, ratio):
    return None  # a device holds only its candidates: greedy's own loop, with collectives


def _candidate_specs(obj, axes):
  fields = obj.candidate_axes
  return obj.replace(**{f: None if getattr(obj, f) is None else P() if a is None else _spec(axes, a)
                        for f, a in fields.items()})


def _pad_candidates(obj, rows):
  """Pads the candidate axis of every candidate-side field to `rows` (invalid, zero)."""
  fields = obj.candidate_axes
  return obj.replace(**{
      f: _pad_rows(getattr(obj, f), rows, repeat_last=False, axis=a)
      for f, a in fields.items() if a is not None and getattr(obj, f) is not None})


@functools.partial(jax.jit, static_argnames=("mesh", "axes", "k", "method", "epsilon", "block"))
def _candidate_greedy(obj, valid, costs, budget, min_gain, key, *, mesh, axes, k, method, epsilon,
                      block):
  def body(local, valid, costs, budget, min_gain, key):
    view = _CandidateShard(local=local, valid=valid, axes=axes)
    return greedy(view, k=k, costs=costs, budget=budget, min_gain=min_gain, method=method,
                  key=key, epsilon=epsilon, block=block)

  specs = (_candidate_specs(obj, axes),) + (P(),) * 5
  args = _place((obj, valid, costs, budget, min_gain, key), specs, mesh)
  return jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P())(*args)


def candidate_sharded_greedy(objective, *, mesh: Mesh, k: int, axis: AxisNames = None,
                             costs=None, budget=None, min_gain=None, method: str = "lazy",
                             key=None, epsilon: float = 0.1, block: Optional[int] = None
                             ) -> Selection:
  """`jaxsel.greedy` on one large objective whose candidates are split over the devices.

  Each device stores and evaluates only its `N/d` candidates: `N/d` rows of a dense
  similarity (`[N/d, N]` instead of `[N, N]`), of the embeddings of a matrix-free objective
  or of a kNN graph; the item-side arrays and the coverage state are replicated. Works for
  `facility_location`, `coverage`, `saturated_coverage` and their matrix-free and kNN forms
  (`jaxsel.facility_location_from_embeddings`, `jaxsel.knn_facility_location`, ...). Arguments and result as in `jaxsel.greedy`; the picks are the same as on
  one device (ties go to the lowest index).

  What is split: every evaluation of all `N` gains (each pick of ``method="dense"``, the
  first pass of ``"lazy"``) costs each device `N/d` candidates. The few candidates that lazy
  greedy re-evaluates per round and stochastic greedy's sample are evaluated by their owners
  with the same fixed shape on every device, so those rounds are not faster than on one
  device: for speed from more devices prefer ``method="dense"``, which is also what lazy
  greedy degenerates to on clipped cosines of high-dimensional embeddings (see
  `docs/scale.md`). Stochastic greedy matches one device when `N` is a multiple of the
  device count (its sample depends on the padded `N`).

  Args:
    objective: one objective (no batch axis).
    mesh: the device mesh; `axis` names the mesh axes the candidates are split over
      (default all). `N` need not divide evenly: the last device gets padded candidates.
  """
  if not isinstance(objective, Objective):
    raise TypeError(f"`objective` must be a jaxsel objective (e.g. `jaxsel.facility_location`), "
                    f"got {type(objective).__name__}.")
  if np.ndim(objective.valid) != 1:
    raise ValueError(f"`objective` must be one instance (`valid` [N]), got `valid` of shape "
                     f"{np.shape(objective.valid)}; for a batch use `jaxsel.sharded_greedy`.")
  axes, d = _mesh_axes(mesh, axis)
  n = objective.valid.shape[-1]
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
    raise ValueError(f"`k` must be an int between 0 and the number of candidates N={n}, got {k!r}.")
  if costs is not None and np.shape(costs) != (n,):
    raise ValueError(f"`costs` must have shape [N] = [{n}], got {np.shape(costs)}.")
  _check_costs(costs, budget)
  if block is None:
    block = min(n, 32)
  # Pad the candidates to a multiple of the device count (a copy only when N does not divide).
  rows = -(-n // d) * d
  obj = _pad_candidates(objective, rows)
  if costs is not None:
    costs = _pad_rows(jnp.asarray(costs, jnp.float32), rows, repeat_last=False)
  specs = (_candidate_specs(obj, axes),) + (P(),) * 5
  args = _global((obj, obj.valid, costs, budget, min_gain, key), specs, mesh)
  return _candidate_greedy(*args, mesh=mesh, axes=axes, k=int(k), method=method,
                           epsilon=epsilon, block=max(block, 1))

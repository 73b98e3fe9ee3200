"""Frozen dataclasses that are pytrees, for every objective, scorer and tree of jaxsel.

`dataclass` is what `flax.struct.dataclass` does (array fields are leaves, `field(static=True)`
fields are part of the tree structure, `.replace(**changes)`), with one difference that
matters for jit: the class is registered with `jax.tree_util.register_pytree_with_keys`, whose
tree structures compare equal only for the same class. Classes registered through
`jax.tree_util.register_dataclass` (as flax's are) give structures that compare *equal* across
classes with the same field names, so a jit cache could hand one class's compiled program to
another (seen: saturated coverage solved with facility location's program, and the matrix-free
pair of the two, a flaky failure that depended on hash buckets).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from jaxsel._src import checks

_STATIC = "jaxsel_static"


def field(*, static: bool = False, **kwargs) -> Any:
  """A dataclass field; `static=True` makes it part of the tree structure (hashable values:
  settings such as a block size or a callable), not a leaf."""
  return dataclasses.field(metadata={_STATIC: static}, **kwargs)


def _replace(self, **changes):
  return dataclasses.replace(self, **changes)


def dataclass(cls):
  """Makes `cls` a frozen dataclass registered as a pytree of its own (see the module
  docstring). Subclasses that add fields are decorated again."""
  cls = dataclasses.dataclass(frozen=True)(cls)
  fields = dataclasses.fields(cls)
  data = tuple(f.name for f in fields if not f.metadata.get(_STATIC, False))
  meta = tuple(f.name for f in fields if f.metadata.get(_STATIC, False))
  keys = tuple(jax.tree_util.GetAttrKey(n) for n in data)

  def flatten_with_keys(obj):
    return tuple(zip(keys, (getattr(obj, n) for n in data))), tuple(getattr(obj, n) for n in meta)

  def flatten(obj):
    return tuple(getattr(obj, n) for n in data), tuple(getattr(obj, n) for n in meta)

  def unflatten(aux, children):
    obj = object.__new__(cls)  # no __init__: leaves may be tracers, specs or placeholders
    for n, v in zip(data, children):
      object.__setattr__(obj, n, v)
    for n, v in zip(meta, aux):
      object.__setattr__(obj, n, v)
    return obj

  jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
  cls.replace = _replace
  return cls


def jit_when_eager(method):
  """A method of a pytree class that, called outside any transform, runs as one compiled
  program per class, static fields and argument shapes (`jax.jit` with `self` a traced
  argument); under `jit`/`vmap` it is traced inline into the caller's program.

  For methods whose body holds `lax.map` / `lax.scan` over a closure made at each call: run
  eagerly, such a loop is a new XLA program at every call (about a second to compile, and
  dozens of memory mappings that JAX's cache keeps, up to thousands of programs), so a loop of
  eager calls compiled without end and could pass Linux's limit of 65530 mappings."""
  program = jax.jit(method)

  @functools.wraps(method)
  def call(self, *args, **kwargs):
    if checks.any_traced((self, args, kwargs)):
      return method(self, *args, **kwargs)
    return program(self, *args, **kwargs)

  return call


# ----------------------------------------------------------------------------- static leaves
# A pytree argument of a jitted function may hold leaves that are not arrays: a plain Python
# callable passed as a CORAG scorer is itself one leaf, and a scorer's closure over a model is
# another. `jit_static_leaves` passes such leaves as static arguments (hashed by identity when
# they have no hash of their own) and the array leaves as traced ones.

_ARRAY_LEAVES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


class _ByIdentity:
  """An unhashable static leaf, hashed and compared by identity."""

  def __init__(self, x):
    self.x = x

  def __hash__(self):
    return id(self.x)

  def __eq__(self, other):
    return isinstance(other, _ByIdentity) and other.x is self.x


def _hashable(x):
  try:
    hash(x)
  except TypeError:
    return _ByIdentity(x)
  return x


def partition(tree):
  """`(arrays, static)`: the array leaves of `tree` (None in place of the others) and a
  hashable description of the rest (`combine` puts them back together)."""
  leaves, treedef = jax.tree.flatten(tree)
  is_array = [isinstance(x, _ARRAY_LEAVES) for x in leaves]
  arrays = [x if a else None for x, a in zip(leaves, is_array)]
  static = tuple(None if a else _hashable(x) for x, a in zip(leaves, is_array))
  return arrays, (treedef, static)


def combine(arrays, static):
  treedef, rest = static
  leaves = [a if s is None else (s.x if isinstance(s, _ByIdentity) else s)
            for a, s in zip(arrays, rest)]
  return jax.tree.unflatten(treedef, leaves)


def jit_static_leaves(fun=None, *, static_argnames=()):
  """`jax.jit` of `fun(first, *args, **kwargs)` where the non-array leaves of `first` (e.g. a
  plain Python function used as a scorer) are static and its array leaves are traced. A new
  closure is a new static value, so it compiles anew; pytrees of arrays compile once per shape."""
  if fun is None:
    return functools.partial(jit_static_leaves, static_argnames=static_argnames)

  @functools.partial(jax.jit, static_argnames=("static",) + tuple(static_argnames))
  def inner(arrays, *args, static, **kwargs):
    return fun(combine(arrays, static), *args, **kwargs)

  @functools.wraps(fun)
  def outer(first, *args, **kwargs):
    arrays, static = partition(first)
    return inner(arrays, *args, static=static, **kwargs)

  return outer

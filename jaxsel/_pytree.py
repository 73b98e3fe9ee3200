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
from typing import Any

import jax

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

"""Pytree classes never share compiled programs: each class is a tree structure of its own.

`jax.tree_util.register_dataclass` (what `flax.struct.dataclass` uses) gives tree structures
that compare equal across classes with the same fields; a jit cache could then run one
objective with another's program (seen as a flaky failure of saturated coverage).
"""

import itertools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel

import reference


def _instances():
  rng = np.random.default_rng(0)
  e = rng.normal(size=(12, 6)).astype(np.float32)
  rel = np.abs(rng.normal(size=(2, 12))).astype(np.float32)
  sim = np.asarray(jaxsel.cosine_similarity(e))
  graph = jaxsel.knn_graph(e, m=12)
  objs = {
      "facility_location": jaxsel.facility_location(sim, rel),
      "saturated_coverage": jaxsel.saturated_coverage(sim, rel),
      "emb_facility_location": jaxsel.facility_location_from_embeddings(e, rel),
      "emb_saturated_coverage": jaxsel.saturated_coverage_from_embeddings(e, rel),
      "knn_facility_location": jaxsel.knn_facility_location(graph, rel),
      "knn_saturated_coverage": jaxsel.knn_saturated_coverage(graph, rel),
  }
  link = (rng.random((12, 12)) < 0.2).astype(np.float32)
  scs = {
      "relevance": jaxsel.relevance_scorer(rel[0], discount=0.9),
      "pairwise": jaxsel.pairwise_scorer(-sim, unary=rel[0]),
      "links": jaxsel.link_scorer(link, source=rel[0]),
      "objective": jaxsel.objective_scorer(objs["facility_location"]),
  }
  return objs, scs, e, sim, rel


def test_every_class_has_its_own_tree_structure():
  objs, scs, *_ = _instances()
  things = {**objs, **scs}
  for (a, x), (b, y) in itertools.combinations(things.items(), 2):
    assert jax.tree.structure(x) != jax.tree.structure(y), (a, b)


def test_look_alike_objectives_back_to_back_under_one_jit():
  """The matrix-free pair and the dense pair have identical fields and shapes; one jitted
  function must still run each with its own code (the regression of the flaky test)."""
  objs, _, e, sim, rel = _instances()
  run = jax.jit(lambda o: jaxsel.greedy(o, k=5, method="dense").indices)
  for fl, sc in (("facility_location", "saturated_coverage"),
                 ("emb_facility_location", "emb_saturated_coverage"),
                 ("knn_facility_location", "knn_saturated_coverage")):
    for name in (fl, sc, fl, sc):
      got = np.asarray(run(objs[name]))
      f = reference.fl_value if "facility" in name else reference.sc_value
      want = reference.greedy(lambda s: f(sim, rel, s), 12, 5)[0]
      np.testing.assert_array_equal(got, want, err_msg=name)
    # Values after the same picks differ between the two objectives: same picks would not
    # prove the programs differ, the values do.
    mask = jnp.zeros(12, bool).at[jnp.asarray([0, 3])].set(True)
    value = jax.jit(lambda o, m: o.value(m))
    assert not np.isclose(float(value(objs[fl], mask)), float(value(objs[sc], mask)))


def test_no_class_is_registered_through_register_dataclass():
  """Every pytree class of the package goes through `jaxsel._src.pytree.dataclass`."""
  root = pathlib.Path(jaxsel.__file__).parent
  for path in root.rglob("*.py"):
    text = path.read_text("utf-8")
    for banned in ("struct.dataclass", "register_dataclass", "chex.dataclass"):
      if path.name == "pytree.py":
        continue
      assert banned not in text, f"{path.relative_to(root)} uses {banned}"


def test_replace_and_static_fields():
  objs, *_ = _instances()
  o = objs["emb_facility_location"]
  o2 = o.replace(block=4)
  assert o2.block == 4 and o.block == 256 and type(o2) is type(o)
  assert jax.tree.structure(o) != jax.tree.structure(o2)  # a static field is structure
  leaves, tree = jax.tree.flatten(o)
  back = jax.tree.unflatten(tree, leaves)
  assert type(back) is type(o) and back.block == o.block
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(o)[0]]
  assert ".candidates" in paths and ".relevance" in paths
  with pytest.raises(Exception):
    o.block = 3  # frozen

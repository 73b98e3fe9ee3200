"""The bridge scorer's text signals (jaxsel/_src/bridge.py) on hand-made passages."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxsel._src import bridge, methods

Q = "What government position was held by the woman who portrayed Corliss Archer in Kiss and Tell?"
TEXTS = ["Kiss and Tell (1945 film): Kiss and Tell is a comedy starring Shirley Temple as Corliss Archer.",
         "Shirley Temple: Shirley Temple Black was an American actress and Chief of Protocol.",
         "Meet Corliss Archer: a radio program from CBS."]


def test_lead_entity_from_plain_documents():
  assert bridge.lead_entity("Shirley Temple: Shirley Temple Black was an actress.") == "Shirley Temple"
  assert bridge.lead_entity("## Kiss and Tell (1945 film)\nKiss and Tell is a film.") == "Kiss and Tell (1945 film)"
  assert bridge.lead_entity("Shirley Temple Black (April 23, 1928) was an actress.") == "Shirley Temple Black"
  assert bridge.lead_entity('"Hello Love" is a 1974 single by Hank Snow.') == "Hello Love"
  assert bridge.lead_entity("anything at all", "Given Title") == "Given Title"
  assert bridge.lead_entity("no capitals here.") == ""


def test_entities_are_capitalised_runs():
  assert bridge.entities("The film by Orson Welles of the United States was shown in Paris.") == \
      ["Orson Welles of the United States", "Paris"]
  assert bridge.entities("He met the Duke of York.") == ["Duke of York"]


def test_signals_of_three_passages():
  s = bridge.bridge_signals(Q, TEXTS, [0, 1, 2], [None, None, None])
  np.testing.assert_array_equal(s.links, [[0, 1, 0], [0, 0, 0], [0, 0, 0]])  # 0 names "Shirley Temple"
  np.testing.assert_array_equal(s.mentioned, [1, 0, 0])  # "Kiss and Tell" (parenthetical dropped)
  assert s.entities[0, 1] == s.entities[1, 0] == pytest.approx(math.log(1 + 3 / 2))
  assert s.entities[0, 2] == 0  # "Corliss Archer" is in the question: not a bridge
  np.testing.assert_array_equal(s.groups, [0, 1, 2])


def test_groups_are_documents_and_sections():
  """Pieces of one document and heading are one group: they never link or share; a Markdown
  file with two headings is two groups, each with its heading as the lead entity."""
  texts = ["Shirley Temple was an actress.", "Shirley Temple Black served as ambassador.",
           "The film starred Shirley Temple.", "Kiss and Tell is a film."]
  s = bridge.bridge_signals("who?", texts, [0, 0, 1, 1], ["Shirley Temple", "Shirley Temple", "Film", "Kiss"])
  np.testing.assert_array_equal(s.groups, [0, 0, 1, 2])
  assert s.links[0, 1] == s.links[1, 0] == 0 and s.links[2, 0] == s.links[2, 1] == 1
  assert s.entities[0, 1] == 0


def test_bridge_scorer_value_and_order():
  s = bridge.bridge_signals(Q, TEXTS, [0, 1, 2], [None] * 3)
  e = np.eye(3, 8, dtype=np.float32)
  req = methods.request(np.ones((1, 8), np.float32), e, costs=np.ones(3), links=s.links,
                        mentioned=s.mentioned, entities=s.entities, groups=s.groups)
  req = req._replace(relevance=jnp.asarray([[0.6, 0.1, 0.5]]))
  sc = methods.scorer("bridge", req)
  want = (0.6 + 1.5) + 0.1 + 0.75 * 1.0 + 0.5 * min(math.log(2.5) / 2.0, 1.0)
  assert float(sc(jnp.asarray([0, 1, -1]))) == pytest.approx(want, rel=1e-6)
  # the second hop earns its bonus only after the first: order matters
  assert float(sc(jnp.asarray([1, 0, -1]))) < float(sc(jnp.asarray([0, 1, -1])))
  same = req._replace(groups=jnp.asarray([0, 0, 2]))  # as if 0 and 1 were one document
  assert float(methods.scorer("bridge", same)(jnp.asarray([0, 1, -1]))) == pytest.approx(
      want - methods.BRIDGE_WEIGHTS["same_group"], rel=1e-6)

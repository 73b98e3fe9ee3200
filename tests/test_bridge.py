"""The bridge scorer's text signals (jaxsel/_src/bridge.py) on hand-made passages."""

import json
import math
import os
import re
import subprocess
import sys

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


def test_a_person_named_by_a_shorter_form_links():
  """An untitled passage's lead is the full name of its first sentence; other passages name the
  person with a middle initial, without the middle name or by a short form of the first name,
  and link to it. The surname alone, a wrong given name or a phrase that drops the first word of
  the lead do not; nor does a passage that writes its own lead."""
  texts = ["John Wilhelm Brunius (1884-1937) was a Swedish actor and director.",
           "Timothy Kevin Story (born 1970) is an American director.",
           "En glad gutt is a 1932 film directed by John W. Brunius, starring Hauk Aabel.",
           "Hurricane Season is a 2010 film directed by Tim Story.",
           "Brunius and Story never met; Karl Brunius and Tom Story were others.",
           "Meet Corliss Archer is a radio program.",
           "Shirley Temple played Corliss Archer."]
  s = bridge.bridge_signals("Who directed En glad gutt?", texts, range(7), [None] * 7)
  assert s.links[2, 0] == 1 and s.links[3, 1] == 1
  assert s.links[2, 1] == s.links[3, 0] == 0
  assert not s.links[4].any()  # a surname alone, or after another given name
  assert s.links[6, 5] == 0  # "Corliss Archer" is not "Meet Corliss Archer"
  assert not s.links[0].any() and not s.links[1].any()
  assert bridge.bridge_signals("Where was Edward Ludwig born?", ["Edward Irving Ludwig was a director."],
                               [0], [None]).mentioned[0] == 1
  names = bridge.ShortNames(["Edward Irving Ludwig", "Henry Ulick Lascelles"])
  assert names.named("by Edward Ludwig and E. I. Ludwig") == {0}
  assert names.named("Henry Lascelles, 3rd Earl", own_lead="Henry Lascelles") == set()
  assert names.named("Henry Lascelles, 3rd Earl") == {1}
  # A surname the case-blind search finds that lower-cases to another string is not an error.
  assert bridge.ShortNames(["Hayato Ikeda"]).named("Prime Minister Hayato İkeda") == set()


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
  same = req._replace(signals=req.signals._replace(groups=jnp.asarray([0, 0, 2])))  # 0, 1: one document
  assert float(methods.scorer("bridge", same)(jnp.asarray([0, 1, -1]))) == pytest.approx(
      want - methods.BRIDGE_WEIGHTS["same_group"], rel=1e-6)


def _lexical_reference(query, texts, groups):
  """`bridge.lexical_signals` in plain Python: word sets, BM25 IDF, sums over sets."""
  words = [{w for w in re.findall(r"\w+", t.lower()) if w not in bridge.STOPWORDS}
           for t in texts]
  n = len(texts)
  df = {}
  for ws in words:
    for w in ws:
      df[w] = df.get(w, 0) + 1
  idf = {w: math.log(1 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}
  q = {w for w in re.findall(r"\w+", query.lower()) if w in df and w not in bridge.STOPWORDS}
  total = sum(idf[w] for w in q)
  overlap = [sum(idf[w] for w in q & ws) / total for ws in words]
  covered = [[sum(idf[w] for w in q & (a | b)) / total for b in words] for a in words]
  norm = [math.sqrt(sum(idf[w] ** 2 for w in ws - q)) for ws in words]
  shared = [[0.0 if groups[i] == groups[j] else
             sum(idf[w] ** 2 for w in (words[i] & words[j]) - q) / (norm[i] * norm[j])
             for j in range(n)] for i in range(n)]
  return overlap, covered, shared


def test_lexical_signals_equal_a_plain_python_reference():
  """Overlap with the question and the words two passages share, without titles or capitals."""
  texts = [t.split(": ", 1)[1].lower() for t in TEXTS] + [
      "shirley temple black served as ambassador to ghana.", "kiss and tell is a play by f. hugh herbert."]
  groups = [0, 1, 2, 3, 3]
  got = bridge.lexical_signals(Q, texts, groups)
  for g, w in zip(got, _lexical_reference(Q, texts, groups)):
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-6)
  overlap, covered, shared = got
  assert shared[0, 1] > 0 and shared[0, 2] == 0  # "shirley temple" is shared, not in the question
  assert shared[3, 4] == 0  # one group (one document's pieces)
  np.testing.assert_allclose(np.diag(covered), overlap, rtol=1e-6)
  s = bridge.bridge_signals(Q, texts, [0, 1, 2, 3, 3], [None] * 5)
  np.testing.assert_array_equal(s.shared, shared)


def test_lexical_signals_of_no_passages_and_no_query_words():
  o, c, s = bridge.lexical_signals("the", ["a cat", "a dog"], [0, 1])
  np.testing.assert_array_equal(o, [0, 0])
  np.testing.assert_array_equal(c, np.zeros((2, 2)))
  o, c, s = bridge.lexical_signals("who?", [], [])
  assert o.shape == (0,) and c.shape == s.shape == (0, 0)


def test_signals_do_not_depend_on_the_string_hash_seed():
  """The float sums of `entities` and the lexical signals ran in set-iteration order, which
  Python's string hashing changes per process: a retrain of the learned scorer from the same
  recipe gave other weights (another SHA-256). Two processes with different PYTHONHASHSEED now
  give the same bytes."""
  doc = open(os.path.join(os.path.dirname(bridge.__file__), "..", "data", "hotpotqa_wiki.md"),
             encoding="utf-8").read()
  paragraphs = [p for p in doc.split("\n\n") if len(p) > 200][:20]
  code = ("import hashlib, json, sys; from jaxsel._src import bridge; ps = json.load(sys.stdin); "
          "s = bridge.bridge_signals(ps[0] + ' ' + ps[1][:60], ps, list(range(len(ps))), [None] * len(ps)); "
          "print(hashlib.sha256(b''.join(a.tobytes() for a in s)).hexdigest())")
  out = {subprocess.run([sys.executable, "-c", code], input=json.dumps(paragraphs), text=True,
                        capture_output=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}
                        ).stdout.strip() for seed in ("1", "2", "3")}
  assert len(out) == 1

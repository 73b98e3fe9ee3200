"""`Pipeline.select` / `select_many` with pinned documents or passages and caps per group, for
every method: never broken, the pinned first, `select_many` equal to `select`, and bad input
refused naming the argument."""

import collections

import numpy as np
import pytest

import jaxsel
from jaxsel._src import text
from jaxsel._src.pipeline.selection import Pipeline
from test_pipeline import Q0, SMALL, sent, split, tiny

DOCS = [p for p in SMALL.split("\n\n") if len(p.strip()) > 40][:6]
METHODS = [("facility_location", Q0), ("coverage", None), ("naive", Q0), ("mmr", Q0), ("corag", Q0)]


@pytest.fixture(scope="module")
def enc():
  return tiny()


@pytest.mark.parametrize("method,query", METHODS)
def test_documents_capped_and_pinned(enc, method, query):
  pipe = Pipeline(enc, method=method, unit="sentence", max_tokens=40, corag_scorer="relevance")
  res = pipe.select(query, DOCS, budget=300, max_per_group=1)  # groups: the documents
  docs = [p.doc for p in res.passages]
  assert len(docs) > 1 and max(collections.Counter(docs).values()) == 1 and res.cost <= 300
  res = pipe.select(query, DOCS, budget=300, pinned=[3])  # every passage of document 3 first
  want = [i for i, p in enumerate(res.candidates) if p.doc == 3]
  np.testing.assert_array_equal(res.indices[: len(want)], want)
  assert res.cost <= 300
  labels = ["a", "b", "a", "b", "c", "c"][: len(DOCS)]
  res = pipe.select(query, DOCS, budget=300, groups=labels, max_per_group=2)
  counts = collections.Counter(labels[p.doc] for p in res.passages)
  assert max(counts.values()) <= 2


def test_passages_equal_direct_greedy(enc):
  pipe = Pipeline(enc, method="facility_location", unit="passage", max_tokens=80)
  passages = split(enc, DOCS)
  labels = [f"src{p.doc % 2}" for p in passages]
  res = pipe.select(Q0, passages, budget=150, pinned=[len(passages) - 1], groups=labels,
                    min_gain=0.0,
                    max_per_group=2)
  assert res.indices[0] == len(passages) - 1
  assert max(collections.Counter(labels[i] for i in res.indices).values()) <= 2
  e = enc.encode([p.text for p in passages], prompt_name="passage")
  r = jaxsel.cosine_similarity(enc.encode([Q0], prompt_name="query"), e)
  obj = jaxsel.facility_location(jaxsel.cosine_similarity(e), r)
  costs = np.asarray([p.tokens for p in passages], np.float32)
  sel = jaxsel.greedy(obj, k=len(passages), costs=costs, budget=150.0,
                      pinned=[len(passages) - 1], groups=[p.doc % 2 for p in passages],
                      max_per_group=2, min_gain=0.0)
  np.testing.assert_array_equal(res.indices, np.asarray(sel.indices)[: int(sel.count)])


@pytest.mark.parametrize("method", ["facility_location", "corag"])
def test_select_many_equals_select(enc, method):
  pipe = Pipeline(enc, method=method, unit="sentence", max_tokens=40, corag_scorer="relevance")
  passages = split(enc, DOCS)
  reqs = [(Q0, passages[:10]), (Q0, passages[5:]), (Q0, passages)]
  pinned = [[1], None, [0, 7]]
  many = pipe.select_many(reqs, budget=200, pinned=pinned, max_per_group=2)
  for (q, docs), p, res in zip(reqs, pinned, many):
    assert p is None or list(res.indices[: len(p)]) == p
    one = pipe.select(q, docs, budget=200, pinned=p, max_per_group=2)
    np.testing.assert_array_equal(res.indices, one.indices)


def test_bad_constraints_name_the_argument(enc):
  pipe = Pipeline(enc, method="facility_location", unit="sentence", max_tokens=40)
  for kw, name in [(dict(pinned=[len(DOCS)]), "pinned"), (dict(pinned=[0, 0]), "pinned"),
                   (dict(groups=["a"], max_per_group=1), "groups"),
                   (dict(groups=["a"] * len(DOCS)), "groups"),
                   (dict(max_per_group=-1), "max_per_group"),
                   (dict(pinned=[0, 1, 2, 3, 4, 5], budget=30), "pinned")]:
    kw = {"budget": 300, **kw}
    with pytest.raises(ValueError, match=f"`{name}"):
      pipe.select(Q0, DOCS, **kw)
  with pytest.raises(ValueError, match="pinned"):
    pipe.select_many([(Q0, DOCS)], budget=300, pinned=[[9]])
  with pytest.raises(ValueError, match="`pinned`"):
    pipe.select_many([(Q0, DOCS)], budget=300, pinned=[[0], [1]])


def test_pinned_beyond_max_depth_refused(enc):
  pipe = Pipeline(enc, method="naive", unit="passage", max_tokens=80, max_depth=2)
  with pytest.raises(ValueError, match="`pinned`.*`max_depth`=2"):
    pipe.select(Q0, split(enc, DOCS), budget=300, pinned=[0, 1, 2])

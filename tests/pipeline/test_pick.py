"""`Pipeline.pick` and `pick_many`, the front the server, the adapters and the command call:
documents as they are (strings or records), each one candidate costing its tokens, blank ones
never picked, the constraints checked once, and picks that name the documents. Checked against
`select` over the same documents as `Passage`s (the library's own path, bit for bit) and on
hand-made cases; the real all-MiniLM-L6-v2 encoder on the bundled HotpotQA article."""

from pathlib import Path

import numpy as np
import pytest

import jaxsel

DOC = (Path(__file__).resolve().parents[2] / "jaxsel" / "data" / "hotpotqa_wiki.md").read_text("utf-8")
PARAS = [p for p in DOC.split("\n\n") if len(p) > 40][:10]
Q = ("What government position was held by the woman who portrayed Corliss Archer in the film "
     "Kiss and Tell?")
# Blank documents between the real ones: `pick` must skip them and still name the others.
DOCS = ["", PARAS[0], "   ", *PARAS[1:6], "\n", *PARAS[6:]]


@pytest.fixture(scope="module")
def pipe():
  return jaxsel.Pipeline(jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2"))


def _as_passages(pipe, docs):
  """What `pick` promises to select among: the non-blank documents whole, costing their
  tokens in the pipeline's tokenizer, `doc` their index as given."""
  kept = [i for i, t in enumerate(docs) if t.strip()]
  costs = pipe.tokenizer.count([docs[i] for i in kept])
  return kept, [jaxsel.Passage(docs[i], 0, len(docs[i]), doc=i, tokens=int(c))
                for i, c in zip(kept, costs)]


@pytest.mark.parametrize("method", [None, "naive", "facility_location"])
@pytest.mark.parametrize("granularity", ["passage", "sentence"])
def test_pick_is_select_over_the_documents_kept_and_names_them(pipe, method, granularity):
  p = pipe if method is None else pipe.replace(method=method)
  got = p.pick(Q, DOCS, budget=160, granularity=granularity)
  kept, passages = _as_passages(pipe, DOCS)
  want = p.select(Q, passages, budget=160, granularity=granularity)
  assert [x.sent_text for x in got.passages] == [x.sent_text for x in want.passages]
  np.testing.assert_array_equal(got.gains, want.gains)
  assert got.picks and len(got.picks) == len(got.passages)
  for q, x in zip(got.picks, got.passages):
    assert DOCS[q.document].strip()  # never a blank one
    assert DOCS[q.document][q.start:q.end] == q.text == x.text  # the span names the document
    assert q.tokens == x.tokens and q.relevance is not None
  assert sum(q.tokens for q in got.picks) <= 160
  if granularity == "passage":  # whole documents, each its tokens
    assert all((q.start, q.end) == (0, len(DOCS[q.document])) for q in got.picks)
    assert [q.document for q in got.picks] == [kept[int(i)] for i in got.indices]


def test_pick_many_equals_pick_on_each_request(pipe):
  requests = [(Q, DOCS), ("Who directed Kiss and Tell?", PARAS[:7]), (Q, PARAS[3:])]
  many = pipe.pick_many(requests, budget=128, pinned=[[1], None, None])
  for (q, docs), pinned, res in zip(requests, [[1], None, None], many):
    alone = pipe.pick(q, docs, budget=128, pinned=pinned)
    assert res.picks == alone.picks
  assert many[0].picks[0].document == 1  # pinned first, named as given


def test_records_costs_keep_and_groups(pipe):
  records = [{"text": t, "title": f"t{i}"} for i, t in enumerate(PARAS[:6])]
  costs = [10] * 6
  res = pipe.replace(method="naive").pick(Q, records, budget=30, costs=costs, granularity="passage",
                                          keep=[True, False, True, True, True, True])
  assert len(res.picks) == 3 and all(q.tokens == 10 for q in res.picks)  # the costs given
  assert 1 not in [q.document for q in res.picks]  # `keep` said no
  capped = pipe.replace(method="naive").pick(Q, PARAS[:6], groups=[0, 0, 0, 1, 1, 1],
                                             max_per_group=1)
  assert sorted(q.document // 3 for q in capped.picks) == [0, 1]  # one per group


@pytest.mark.parametrize("kwargs, match", [
    ({"pinned": [0]}, r"`pinned\[0\]` = 0 is an empty document"),
    ({"pinned": [99]}, r"`pinned\[0\]` = 99 is not a document index \(0 to 12\)"),
    ({"pinned": [1, 1]}, r"`pinned` names a document twice"),
    ({"groups": [0, 1]}, r"`groups` must hold one entry per document \(13\), got 2"),
    ({"groups": [0] * 13}, r"`groups` needs `max_per_group`"),
    ({"costs": [1] * 12}, r"`costs` must hold one entry per document"),
    ({"costs": [-1] * 13}, r"`costs\[1\]` must be a whole number of tokens >= 0"),
    ({"budget": 0}, r"`budget` must be a whole number of tokens >= 1"),
    ({"budget": 2}, r"`budget` 2 is below the smallest passage"),
    ({"keep": [False] * 13}, r"`documents` are all empty or whitespace"),
    ({"embeddings": np.ones((3, 4))}, r"`embeddings` must be \[N, D\] with one row per document"),
    ({"granularity": "word"}, r"Unknown `granularity` .word.; use one of"),
])
def test_bad_requests_are_refused_naming_the_argument(pipe, kwargs, match):
  with pytest.raises(ValueError, match=match):
    pipe.pick(Q, DOCS, **{"budget": 128, **kwargs})


def test_pick_many_names_the_request_at_fault(pipe):
  with pytest.raises(ValueError, match=r"`requests\[1\]\.pinned\[0\]` = 7 is not a document"):
    pipe.pick_many([(Q, PARAS[:5]), (Q, PARAS[:5])], pinned=[None, [7]], budget=128)
  with pytest.raises(TypeError, match=r"`documents\[1\]` must be a str or a record"):
    pipe.pick(Q, ["a text", 3])

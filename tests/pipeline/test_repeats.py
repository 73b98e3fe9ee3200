"""CORAG, the default method, sends a text once: a candidate repeated (the same chunk from two
retrievers, a document given twice) is searched and topped up once, and its copy changes
nothing. The real all-MiniLM-L6-v2 encoder on the bundled HotpotQA article; NaiveRAG, which
ranks by relevance alone, shows the input does repeat."""

from pathlib import Path

import pytest

import jaxsel
from jaxsel._src.pipeline import candidates

DOC = (Path(__file__).resolve().parents[2] / "jaxsel" / "data" / "hotpotqa_wiki.md").read_text("utf-8")
PARAS = [p for p in DOC.split("\n\n") if len(p) > 40][:12]
Q = ("What government position was held by the woman who portrayed Corliss Archer in the film "
     "Kiss and Tell?")


@pytest.fixture(scope="module")
def pipe():
  return jaxsel.Pipeline(jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2"))


def texts(res):
  return [p.sent_text for p in res.passages]


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["passage", "sentence"])
def test_a_repeated_text_is_sent_once_and_changes_nothing(pipe, granularity):
  once = pipe.select(Q, PARAS, budget=384, granularity=granularity)
  # the copies after their originals (sentence), or before them (passage)
  docs = PARAS + PARAS[:6] if granularity == "sentence" else PARAS[:6] + PARAS
  twice = pipe.select(Q, docs, budget=384, granularity=granularity)
  assert twice.method == "corag" and texts(twice) == texts(once)
  assert len(set(texts(twice))) == len(texts(twice))
  assert twice.candidate_scores.shape[1] == len(twice.candidates)  # every candidate scored
  naive = pipe.replace(method="naive").select(Q, PARAS + PARAS[:6], budget=384,
                                              granularity=granularity)
  assert len(set(texts(naive))) < len(texts(naive))  # the input does repeat its best texts


def test_select_many_equals_select_with_and_without_repeats(pipe):
  reqs = [(Q, PARAS + PARAS[:6]), ("Who directed Kiss and Tell?", PARAS[3:])]
  many = pipe.select_many(reqs, budget=256)
  for (q, docs), res in zip(reqs, many):
    assert texts(res) == texts(pipe.select(q, docs, budget=256))
    assert len(set(texts(res))) == len(texts(res))


def test_a_pinned_copy_is_the_one_sent(pipe):
  n = len(PARAS)
  res = pipe.select(Q, PARAS + PARAS[:1], budget=384, pinned=[n])  # document 0, again
  docs = [p.doc for p in res.passages]
  assert docs[0] == n and 0 not in docs and res.passages[0].text in PARAS[0]


def test_repeats_compare_the_text_as_sent():
  p = [jaxsel.Passage("Paris is in France.", 0, 19, doc=0, tokens=5),
       jaxsel.Passage("Paris is in France.", 0, 19, doc=1, tokens=5),
       jaxsel.Passage("Paris is in France.", 0, 19, doc=2, tokens=9, prefix="Texas: "),
       jaxsel.Passage("Lyon.", 0, 5, doc=3, tokens=2)]
  assert candidates.repeats(p).tolist() == [False, True, False, False]
  assert candidates.repeats(p, ([1], None, None)).tolist() == [True, False, False, False]
  assert candidates.repeats(p[2:]) is None

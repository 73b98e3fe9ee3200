"""The order a context is sent in (`SelectionResult.ordered`), and the prefix-stable mode of a
conversation (`previous=`): a follow-up's context starts with the pieces the earlier one sent."""

import os

import numpy as np
import pytest

import jaxsel

DOC = open(os.path.join(os.path.dirname(jaxsel.__file__), "data", "hotpotqa_wiki.md"),
           encoding="utf-8").read()
TURNS = ["What government position was held by the woman who portrayed Corliss Archer in the "
         "film Kiss and Tell?",
         "Which film did Shirley Temple star in as Corliss Archer?",
         "Who else starred in Kiss and Tell besides Shirley Temple?"]


@pytest.fixture(scope="module")
def results():
  pipe = jaxsel.Pipeline(jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2"))
  # Whole passages: a run of sentences cut otherwise in the next turn is a new piece.
  return [pipe.select(q, [DOC], budget=256, granularity="passage") for q in TURNS]


def test_every_order_is_a_permutation_of_the_picks(results):
  res = results[0]
  assert len(res) >= 3
  picked = sorted(p.sent_text for p in res.passages)
  for order in ("selection", "pick", "document", "relevance", "edges"):
    assert sorted(p.sent_text for p in res.ordered(order)) == picked
  assert res.ordered("pick") == res.passages == res.ordered("selection")
  doc = res.ordered("document")
  assert [(p.doc, p.start) for p in doc] == sorted((p.doc, p.start) for p in doc)
  by_rel = [res.passages[i] for i in np.argsort(-res.scores, kind="stable")]
  assert res.ordered("relevance") == by_rel
  edges = res.ordered("edges")
  assert edges[0] == by_rel[0] and edges[-1] == by_rel[1]  # the two most relevant at the ends
  if len(by_rel) >= 3:
    assert edges[1] == by_rel[2]
  with pytest.raises(ValueError, match="order"):
    res.context(order="random")


def _shared(a: str, b: str) -> int:
  return len(os.path.commonprefix([a, b]))


def test_a_follow_up_keeps_the_pieces_sent_before_at_the_front(results):
  # A scripted three-turn conversation: with `previous`, each context starts with the earlier
  # turn's pieces that are picked again, in their order, byte for byte.
  plain, stable = [results[0].context()], [results[0].context()]
  for before, now in zip(results, results[1:]):
    again = [p.sent_text for p in before.ordered("selection", previous=None)
             if p.sent_text in {q.sent_text for q in now.passages}]
    ctx = now.context(previous=before.ordered("selection", previous=None))
    ordered = now.ordered(previous=before)
    assert [p.sent_text for p in ordered[:len(again)]] == again
    assert sorted(p.sent_text for p in ordered) == sorted(p.sent_text for p in now.passages)
    assert ctx == now.context(previous=before)
    plain.append(now.context())
    stable.append(ctx)
  share = lambda ctxs: sum(_shared(a, b) for a, b in zip(ctxs, ctxs[1:]))  # noqa: E731
  assert share(stable) >= share(plain)

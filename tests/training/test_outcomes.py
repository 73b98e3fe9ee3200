"""`training/outcomes.py`: each outcome feature of a selection, against values worked out by
hand on a three-paragraph request."""

import numpy as np

import jaxsel
from training import outcomes


def _request():
  texts = ["Ed Wood was an American filmmaker who directed Glen or Glenda.",
           "Glen or Glenda is a 1953 film starring Bela Lugosi.",
           "Paris is the capital of France."]
  passages = [jaxsel.Passage(t, 0, len(t), doc=i, tokens=10) for i, t in enumerate(texts)]
  emb = np.asarray([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], np.float32)
  return outcomes.Request("Who starred in the film Ed Wood directed?", passages,
                          np.asarray([1.0, 0.0], np.float32), emb), passages


def test_features_of_a_two_hop_selection():
  req, ps = _request()
  picks = [[0, 0, len(ps[0].text), 10], [1, 0, 21, 5]]  # paragraph 0 whole, part of 1
  f = dict(zip(outcomes.OUTCOME_FEATURES, req.features(picks, 30.0)))
  assert f["tokens / budget"] == np.float32(0.5)
  np.testing.assert_allclose([f["log pieces"], f["log paragraphs"]], np.log1p([2, 2]))
  assert f["whole share"] == 0.5
  # the question's content words: starred (in no paragraph), film, ed, wood, directed (in one
  # each); the context holds ed, wood, directed ("film" is past the second pick's end)
  df = {"starred": 0, "film": 1, "ed": 1, "wood": 1, "directed": 1}
  idf = {w: np.log1p((3 - d + 0.5) / (d + 0.5)) for w, d in df.items()}
  held = idf["ed"] + idf["wood"] + idf["directed"]
  np.testing.assert_allclose(f["question words held"], held / sum(idf.values()), rtol=1e-6)
  assert f["question phrases named"] == 1.0  # "Ed Wood"
  np.testing.assert_allclose([f["best cosine"], f["mean cosine"]], [1.0, 0.8], rtol=1e-6)
  assert f["chain"] == 1.0  # the question names Ed Wood; Ed Wood's paragraph names Glen or Glenda


def test_an_off_topic_pick_is_not_in_the_chain_and_agreement_is_jaccard():
  req, ps = _request()
  f = dict(zip(outcomes.OUTCOME_FEATURES, req.features([[2, 0, len(ps[2].text), 10]], 10.0)))
  assert f["chain"] == 0.0 and f["question phrases named"] == 0.0 and f["best cosine"] == 0.0
  docs = np.empty((1, 3), object)
  docs[0] = [frozenset({0, 1}), frozenset({1}), frozenset({2})]
  np.testing.assert_allclose(outcomes.agreement(docs), [[0.25, 0.25, 0.0]])

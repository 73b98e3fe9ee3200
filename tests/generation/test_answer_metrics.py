"""Answer metrics against the official HotpotQA evaluation logic, hand-computed values and
rouge-score itself."""

import collections
import re
import string

import pytest
from hypothesis import given, strategies as st
from rouge_score import rouge_scorer

from jaxsel._src import answer_metrics as am


# ----------------------------------------------------------------------------- reference
# The official HotpotQA answer evaluation, restated plainly: normalize_answer, f1_score and
# exact_match_score of hotpot_evaluate_v1.py in github.com/hotpotqa/hotpot (the script that
# scores the leaderboard). Only the answer part; supporting facts are not used here.


def ref_normalize(s):
  def remove_articles(text):
    return re.sub(r"\b(a|an|the)\b", " ", text)

  def white_space_fix(text):
    return " ".join(text.split())

  def remove_punc(text):
    exclude = set(string.punctuation)
    return "".join(ch for ch in text if ch not in exclude)

  return white_space_fix(remove_articles(remove_punc(s.lower())))


def ref_f1(prediction, ground_truth):
  p, g = ref_normalize(prediction), ref_normalize(ground_truth)
  if p in ["yes", "no", "noanswer"] and p != g:
    return 0
  if g in ["yes", "no", "noanswer"] and p != g:
    return 0
  p_tokens, g_tokens = p.split(), g.split()
  num_same = sum((collections.Counter(p_tokens) & collections.Counter(g_tokens)).values())
  if num_same == 0:
    return 0
  precision = num_same / len(p_tokens)
  recall = num_same / len(g_tokens)
  return 2 * precision * recall / (precision + recall)


def ref_em(prediction, ground_truth):
  return ref_normalize(prediction) == ref_normalize(ground_truth)


CASES = [
    ("Paris", "Paris"),
    ("paris.", "Paris"),
    ("The Eiffel Tower", "Eiffel tower"),
    ("an apple a day", "Apple day"),
    ("the cat sat on the mat", "the cat is on the mat"),
    ("Barack Obama", "Obama"),
    ("yes", "yes"),
    ("Yes.", "yes"),
    ("yes", "no"),
    ("yes it is", "yes"),
    ("no", "no way"),
    ("noanswer", "noanswer"),
    ("", ""),
    ("the", ""),
    ("", "Paris"),
    ("1,000,000", "1000000"),
    ("U.S.A.", "USA"),
    ("rock-and-roll", "rock and roll"),
    ("  New   York\tCity ", "new york city"),
    ("theater", "the ater"),
    ("Athens, Greece", "Athens"),
    ("a a a b", "a b b"),
    ("x x y", "x y y z"),
    ("Café Müller", "café müller!"),
    ("«Quoted»", "quoted"),
]


@pytest.mark.parametrize("prediction,gold", CASES)
def test_matches_official_script(prediction, gold):
  assert am.normalize_answer(prediction) == ref_normalize(prediction)
  assert am.exact_match(prediction, gold) == float(ref_em(prediction, gold))
  assert am.f1(prediction, gold) == pytest.approx(ref_f1(prediction, gold), abs=1e-12)


_PIECES = st.sampled_from(["a", "an", "the", "The", "yes", "no", "noanswer", "cat", "Cat.",
                           "dog", "x-y", ",", "!", "  ", "\t", "é", "1", "AN"])


@given(st.lists(_PIECES, max_size=8), st.lists(_PIECES, max_size=8))
def test_matches_official_script_on_random_texts(p, g):
  prediction, gold = " ".join(p), "".join(g)
  assert am.exact_match(prediction, gold) == float(ref_em(prediction, gold))
  assert am.f1(prediction, gold) == pytest.approx(ref_f1(prediction, gold), abs=1e-12)


def test_hand_computed_values():
  assert am.normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
  assert am.normalize_answer("An apple-pie") == "applepie"
  assert am.exact_match("The Beatles!", "beatles") == 1.0
  assert am.exact_match("Beatles band", "beatles") == 0.0
  # "cat sat on mat" vs "cat is on mat" once "the" is dropped: 3 of 4 words each side.
  assert am.f1("the cat sat on the mat", "the cat is on the mat") == pytest.approx(0.75)
  # "barack obama" vs "obama": precision 1/2, recall 1 -> 2/3.
  assert am.f1("Barack Obama", "Obama") == pytest.approx(2 / 3)
  # Counts with multiplicity: {x:2, y:1} & {x:1, y:2, z:1} = 2 -> P 2/3, R 2/4 -> 4/7.
  assert am.f1("x x y", "x y y z") == pytest.approx(4 / 7)
  # yes/no answers score all or nothing.
  assert am.f1("yes it is", "yes") == 0.0
  assert am.f1("no", "no way") == 0.0
  assert am.f1("Yes.", "yes") == 1.0
  # The official script's quirk: empty after normalisation -> EM 1, F1 0.
  assert am.exact_match("the", "") == 1.0
  assert am.f1("the", "") == 0.0


def test_best_over_several_answers():
  answers = ["United States of America", "USA", "U.S."]
  assert am.exact_match("usa", answers) == 1.0
  assert am.exact_match("America", answers) == 0.0
  # "america" vs "united states of america": P 1, R 1/4 -> 0.4; the others score 0.
  assert am.f1("America", answers) == pytest.approx(0.4)
  assert am.f1("U.S.", answers) == 1.0
  assert am.f1("x", ("y", "x")) == 1.0


def _rouge_reference(prediction, reference, use_stemmer=True):
  scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=use_stemmer)
  return {k: v.fmeasure for k, v in scorer.score(reference, prediction).items()}


def test_rouge_hand_computed():
  # Unigrams: 5 of 6 shared each way; bigrams "the cat", "on the", "the mat": 3 of 5;
  # longest common subsequence "the cat on the mat": 5 of 6.
  r = am.rouge("the cat sat on the mat", "the cat is on the mat")
  assert r == pytest.approx({"rouge1": 5 / 6, "rouge2": 3 / 5, "rougeL": 5 / 6})
  # "a b c d" vs "a c": R1 P 2/4 R 1 -> 2/3; no shared bigram; LCS "a c" -> 2/3.
  r = am.rouge("a b c d", "a c")
  assert r == pytest.approx({"rouge1": 2 / 3, "rouge2": 0.0, "rougeL": 2 / 3})
  # Order matters for ROUGE-2 and L, not for ROUGE-1: LCS of "c b a" and "a b c" is 1 word.
  r = am.rouge("c b a", "a b c")
  assert r == pytest.approx({"rouge1": 1.0, "rouge2": 0.0, "rougeL": 1 / 3})
  # Stemming: "running dogs" ~ "run dog".
  assert am.rouge("running dogs", "run dog")["rouge1"] == 1.0
  assert am.rouge("running dogs", "run dog", use_stemmer=False)["rouge1"] == 0.0
  assert am.rouge("", "anything") == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}


@pytest.mark.parametrize("prediction,reference", CASES + [
    ("Paris is the capital and largest city of France.", "The capital of France is Paris."),
    ("He was born in 1961 in Honolulu, Hawaii.", "Honolulu"),
])
@pytest.mark.parametrize("use_stemmer", [True, False])
def test_rouge_equals_rouge_score(prediction, reference, use_stemmer):
  got = am.rouge(prediction, reference, use_stemmer=use_stemmer)
  assert got == pytest.approx(_rouge_reference(prediction, reference, use_stemmer), abs=1e-12)
  assert set(got) == set(am.ROUGE_TYPES) and all(type(v) is float for v in got.values())


def test_answer_scores():
  s = am.answer_scores("Barack Obama", ["Obama", "Barack Hussein Obama"])
  assert s["em"] == 0.0
  # Best F1: "barack obama" vs "barack hussein obama": P 1, R 2/3 -> 0.8.
  assert s["f1"] == pytest.approx(0.8)
  assert s["rouge1"] == pytest.approx(0.8)
  assert s["rougeL"] == pytest.approx(0.8)
  assert s["rouge2"] == 0.0  # no shared bigram with either answer
  assert set(s) == {"em", "f1", "rouge1", "rouge2", "rougeL"}


@pytest.mark.parametrize("call,match", [
    (lambda: am.f1("x", []), "`answers` is empty"),
    (lambda: am.exact_match("x", None), "`answers` must be a list of strings"),
    (lambda: am.f1("x", ["ok", 3]), r"`answers\[1\]` must be a str"),
    (lambda: am.f1(None, "x"), "`prediction` must be a str"),
    (lambda: am.rouge("x", b"y"), "`reference` must be a str"),
    (lambda: am.rouge("x", "y", use_stemmer=1), "`use_stemmer` must be a Python bool"),
    (lambda: am.exact_match("\udc80", "x"), "lone surrogate"),
])
def test_bad_input_is_named(call, match):
  with pytest.raises((TypeError, ValueError), match=match):
    call()

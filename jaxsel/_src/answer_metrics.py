"""Answer metrics: HotpotQA's exact match and token F1, and ROUGE-1/2/L.

Plain Python, outside jit. `exact_match` and `f1` follow the official HotpotQA evaluation
script (hotpot_evaluate_v1.py) to the letter, including its quirks:

* the normalisation lower-cases, drops ASCII punctuation, drops the words a/an/the and
  collapses whitespace, in that order;
* when either normalised side is "yes", "no" or "noanswer", F1 is 1 only for an exact match;
* F1 is 0 when nothing is shared, so two answers that normalise to nothing ("", "the") have
  exact match 1 but F1 0.

With several gold answers (aliases), a prediction scores the best of them, as in SQuAD.
`rouge` gives ROUGE-1/2/L F-measures from the `rouge-score` package (Porter stemming by
default, as the selection metrics in `training/evaluation.py` use).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Sequence, Union

from jaxsel._src import checks

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_CLOSED_ANSWERS = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
  """HotpotQA's answer normalisation: lower case, no punctuation, no a/an/the, single spaces."""
  text = text.lower().translate(_PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def _answers(answers: Union[str, Sequence[str]]) -> list:
  if isinstance(answers, str):
    answers = [answers]
  return checks.check_texts(answers, "answers", allow_empty=False)


def _text(text: str, name: str) -> str:
  if not isinstance(text, str):
    raise TypeError(f"`{name}` must be a str, got {type(text).__name__}.")
  checks.check_unicode(text, name)
  return text


def _token_f1(prediction: str, gold: str) -> float:
  """F1 of one prediction against one gold answer, both already normalised."""
  if prediction != gold and (prediction in _CLOSED_ANSWERS or gold in _CLOSED_ANSWERS):
    return 0.0
  predicted, wanted = prediction.split(), gold.split()
  shared = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
  if shared == 0:
    return 0.0
  precision, recall = shared / len(predicted), shared / len(wanted)
  return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, answers: Union[str, Sequence[str]]) -> float:
  """1.0 when `prediction` equals one of `answers` after `normalize_answer`, else 0.0.

  Args:
    prediction: the generated answer.
    answers: the gold answer, or a non-empty list of acceptable answers.
  """
  predicted = normalize_answer(_text(prediction, "prediction"))
  return float(any(predicted == normalize_answer(a) for a in _answers(answers)))


def f1(prediction: str, answers: Union[str, Sequence[str]]) -> float:
  """HotpotQA's token F1 of `prediction`, the best over `answers` (a str or a non-empty list).

  Tokens are the words of the normalised texts, counted with multiplicity.
  """
  predicted = normalize_answer(_text(prediction, "prediction"))
  return max(_token_f1(predicted, normalize_answer(a)) for a in _answers(answers))


_SCORERS = {}


def _scorer(use_stemmer: bool):
  if use_stemmer not in _SCORERS:
    # rouge-score loads NLTK (seconds): only a caller of ROUGE pays for it.
    rouge_scorer = checks.optional_module("rouge_score.rouge_scorer", feature="ROUGE-L",
                                          extra="eval")
    _SCORERS[use_stemmer] = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
  return _SCORERS[use_stemmer]


def rouge(prediction: str, reference: str, *, use_stemmer: bool = True) -> dict:
  """ROUGE-1, ROUGE-2 and ROUGE-L (longest common subsequence) F-measures, each in [0, 1].

  `rouge-score` keeps only lower-cased ASCII letters and digits as tokens, so a text without
  any (empty, or non-Latin script) scores 0.

  Returns:
    {"rouge1": float, "rouge2": float, "rougeL": float}.
  """
  prediction = _text(prediction, "prediction")
  reference = _text(reference, "reference")
  scores = _scorer(checks.static_bool(use_stemmer, "use_stemmer")).score(reference, prediction)
  return {name: float(scores[name].fmeasure) for name in ROUGE_TYPES}


def answer_scores(prediction: str, answers: Union[str, Sequence[str]], *,
                  use_stemmer: bool = True) -> dict:
  """All answer metrics of one prediction: {"em", "f1", "rouge1", "rouge2", "rougeL"}.

  ROUGE is the best over `answers` per type, like exact match and F1.
  """
  answers = _answers(answers)
  out = {"em": exact_match(prediction, answers), "f1": f1(prediction, answers)}
  per_answer = [rouge(prediction, a, use_stemmer=use_stemmer) for a in answers]
  out.update({name: max(s[name] for s in per_answer) for name in ROUGE_TYPES})
  return out

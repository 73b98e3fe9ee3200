"""Context-selection metrics against gold passages, and paired bootstrap confidence intervals.

Shape legend: Q questions, N passages, T positions of a selected order (-1 padded).

Plain NumPy, outside jit. For one question a selection is an order of passage indices; the
metrics compare it with the gold (supporting) passages:

* `recall`: the fraction of gold passages selected;
* `joint_recall`: 1 when every gold passage is selected (multi-hop questions need all);
* `answer_in_context`: an answer string occurs in the selected text (case- and
  whitespace-insensitive); NaN for yes/no answers, which any text "contains";
* `rouge_l`: ROUGE-L F1 (`rouge-score`, stemmed) of the selected text against the gold text;
* `tokens`: the selection's cost.

`paired_bootstrap` resamples questions to give a confidence interval of the mean difference
between two methods on the same questions.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence

import numpy as np
from rouge_score import rouge_scorer

METRICS = ("recall", "joint_recall", "answer_in_context", "rouge_l", "tokens")
_YES_NO = {"yes", "no"}


def _norm(s: str) -> str:
  return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def _picked(order, n: int) -> np.ndarray:
  order = np.asarray(order).reshape(-1)
  order = order[order >= 0]
  if order.size and order.max() >= n:
    raise ValueError(f"order holds index {order.max()} but there are only {n} passages.")
  return order


def gold_recall(order, gold) -> float:
  """Fraction of gold passages in `order` (1 when there is no gold passage)."""
  gold = np.asarray(gold, bool)
  k = gold.sum()
  if k == 0:
    return 1.0
  return float(gold[_picked(order, gold.size)].sum() / k)


def answer_in_context(context: str, answers: Sequence[str]) -> float:
  """1.0 if a (non yes/no) answer occurs in `context`, 0.0 if none does, NaN when there is
  no usable answer string."""
  usable = [a for a in answers if _norm(a) and _norm(a) not in _YES_NO]
  if not usable:
    return float("nan")
  ctx = f" {_norm(context)} "
  return float(any(f" {_norm(a)} " in ctx for a in usable))


_ROUGE = None


def rouge_l(prediction: str, reference: str) -> float:
  """ROUGE-L F1 of `prediction` against `reference` (rouge-score, Porter stemming)."""
  global _ROUGE
  if _ROUGE is None:
    _ROUGE = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
  if not prediction.strip() or not reference.strip():
    return 0.0
  return float(_ROUGE.score(reference, prediction)["rougeL"].fmeasure)


def selection_metrics(order, *, texts: Sequence[str], gold, costs, answers: Sequence[str] = (),
                      with_rouge: bool = True) -> dict:
  """All metrics of one question's selected `order` (indices into `texts`, -1 padded)."""
  texts = list(texts)
  gold = np.asarray(gold, bool)
  idx = _picked(order, len(texts))
  context = "\n\n".join(texts[i] for i in idx)
  reference = "\n\n".join(t for t, g in zip(texts, gold) if g)
  r = gold_recall(idx, gold)
  out = {"recall": r, "joint_recall": float(r == 1.0),
         "answer_in_context": answer_in_context(context, answers),
         "tokens": float(np.asarray(costs, np.float64)[idx].sum())}
  if with_rouge:
    out["rouge_l"] = rouge_l(context, reference)
  return out


class Interval(NamedTuple):
  mean: float  # mean difference a - b
  low: float
  high: float

  def excludes_zero(self) -> bool:
    return self.low > 0 or self.high < 0


def paired_bootstrap(a, b, *, n_resamples: int = 10_000, confidence: float = 0.95,
                     seed: int = 0) -> Interval:
  """Percentile bootstrap CI of `mean(a - b)` over questions resampled with replacement.

  `a`, `b`: `[Q]` per-question values of two methods on the same questions; NaN pairs
  (metric undefined for that question) are dropped."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape or a.ndim != 1:
    raise ValueError(f"`a` and `b` must be [Q] arrays of the same questions, got {a.shape} and {b.shape}.")
  if not 0 < confidence < 1:
    raise ValueError(f"`confidence` must be in (0, 1), got {confidence}.")
  if n_resamples < 1:
    raise ValueError(f"`n_resamples` must be positive, got {n_resamples}.")
  d = a - b
  d = d[np.isfinite(d)]
  if d.size == 0:
    return Interval(float("nan"), float("nan"), float("nan"))
  rng = np.random.default_rng(seed)
  means = np.empty(n_resamples)
  for s in range(0, n_resamples, 1000):  # chunks keep memory at 1000·Q
    e = min(s + 1000, n_resamples)
    means[s:e] = d[rng.integers(0, d.size, (e - s, d.size))].mean(axis=1)
  tail = (1 - confidence) / 2 * 100
  lo, hi = np.percentile(means, [tail, 100 - tail])
  return Interval(float(d.mean()), float(lo), float(hi))


def summarize(per_question: Sequence[dict], *, baseline: Optional[Sequence[dict]] = None,
              n_resamples: int = 10_000, seed: int = 0) -> dict:
  """Mean of each metric over questions (NaN-aware) and, with `baseline` (the same questions
  in the same order), the paired bootstrap CI of the difference for each metric."""
  out = {}
  keys = [k for k in per_question[0] if k in METRICS or k == "latency_ms"] if per_question else []
  for k in keys:
    v = np.asarray([q[k] for q in per_question], np.float64)
    out[k] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
    if baseline is not None:
      if len(baseline) != len(per_question):
        raise ValueError(f"`baseline` has {len(baseline)} questions, the method {len(per_question)}.")
      w = np.asarray([q[k] for q in baseline], np.float64)
      out[k + "_diff"] = paired_bootstrap(v, w, n_resamples=n_resamples, seed=seed)._asdict()
  return out

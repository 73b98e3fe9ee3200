"""Evaluation by generated answers (the CORAG paper's protocol): select a context per question
with each method through `jaxsel.Pipeline`, let a generator answer from it, and score the
answers against the gold ones.

Plain Python, outside jit. For each question the candidates are its paragraphs as documents,
one per paragraph, each `"title: paragraph"` (as in `training/qa.py`), and the pipeline splits
them as it splits any document. The prompt is exactly the one `Pipeline.answer` builds (the
default template, context in document order), so the numbers describe `Pipeline.answer`; the
prompts of all questions are generated in batches (`generator.generate(list_of_prompts)`).

Generated answers are cached in a JSON file keyed by (generator, max_new_tokens, prompt) and
written atomically after every batch, so a run can be stopped and resumed, and a rerun with the
same prompts generates nothing. A changed selection (another scorer, budget or encoder) gives
other prompts and so new generations, never stale answers.

Metrics per question (`jaxsel.contrib.answer_scores`): HotpotQA's exact match and token F1 and ROUGE-1,
ROUGE-2, ROUGE-L F-measures, each the best over the gold answers; and, from the selection, the
gold-paragraph recall and joint recall (every gold paragraph has a selected passage).
`summarize` gives the means and paired bootstrap CIs of each method's difference from the
baseline (`training.evaluation.paired_bootstrap`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Callable, Optional, Sequence

import numpy as np

import jaxsel
from training.files import atomic_write
from training import evaluation
from training.qa import QAExample

METHODS = ("naive", "corag")
LABELS = {"naive": "NaiveRAG", "corag": "CORAG", "facility_location": "facility location",
          "saturated_coverage": "saturated coverage", "mmr": "MMR"}
ANSWER_METRICS = ("em", "f1", "rouge1", "rouge2", "rougeL")
SELECTION_METRICS = ("recall", "joint_recall", "tokens")
METRICS = ANSWER_METRICS + SELECTION_METRICS


def cache_key(generator_name: str, max_new_tokens: int, prompt: str) -> str:
  """The answer cache's key: what the generated text depends on."""
  blob = json.dumps([generator_name, int(max_new_tokens), prompt], ensure_ascii=False)
  return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
  """Generated answers on disk: `{"format": ..., "answers": {key: {"answer", "method", "id"}}}`.

  Every `save` rewrites the whole file atomically (`atomic_write`), so a killed run leaves the
  answers of its last finished batch. `path=None` keeps the answers in memory only.
  """

  FORMAT = "jaxsel-answer-cache/1"

  def __init__(self, path: Optional[str]):
    self.path = path
    self.entries = {}
    if path is not None and os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        data = json.load(f)
      if data.get("format") != self.FORMAT:
        raise ValueError(f"{path} is not an answer cache ({self.FORMAT}); delete it or pass "
                         "another --cache.")
      self.entries = data["answers"]

  def get(self, key: str) -> Optional[str]:
    entry = self.entries.get(key)
    return None if entry is None else entry["answer"]

  def put(self, key: str, answer: str, **info) -> None:
    self.entries[key] = {"answer": answer, **info}

  def save(self) -> None:
    if self.path is None:
      return
    os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
    data = {"format": self.FORMAT, "answers": self.entries}
    atomic_write(self.path, json.dumps(data, ensure_ascii=False, indent=0).encode("utf-8"))


def select_contexts(pipe: "jaxsel.Pipeline", examples: Sequence[QAExample], *,
                    methods: Sequence[str] = METHODS, budget: float = 256.0,
                    progress: Optional[Callable[[int, int], None]] = None) -> dict:
  """Selects every question's context with every method; the prompts `Pipeline.answer` would
  send (give `pipe` the generator, so costs are counted in its tokens as `answer` counts them).

  The methods share the pipeline's embedding cache (`pipe.replace(method=...)`), so each
  question's paragraphs are embedded once. Each method runs with the pipeline's defaults.

  Returns:
    `{method: [{"id", "prompt", "recall", "joint_recall", "tokens", "picks"}, ...]}`, one row
    per question in the order of `examples`.
  """
  pipes = {m: pipe.replace(method=m) for m in methods}
  out = {m: [] for m in methods}
  for i, ex in enumerate(examples):
    docs = ex.texts()
    gold = np.asarray(ex.gold, bool)
    for m in methods:
      sel = pipes[m].select(ex.question, docs, budget=budget)
      picked = np.zeros(len(docs), bool)
      picked[[p.doc for p in sel.passages]] = True
      recall = float(picked[gold].mean()) if gold.any() else 1.0
      out[m].append({"id": ex.id, "prompt": answer_prompt(sel), "recall": recall,
                     "joint_recall": float(recall == 1.0), "tokens": float(sel.cost),
                     "picks": [int(p.doc) for p in sel.passages]})
    if progress is not None:
      progress(i + 1, len(examples))
  return out


def answer_prompt(selection) -> str:
  """The prompt `Pipeline.answer` builds from a selection with its defaults (the default
  template, the context in document order)."""
  return selection.prompt(None, order="document")


def generate_answers(generator, prompts: Sequence[str], *, cache: AnswerCache,
                     max_new_tokens: int = 32, batch_size: int = 16, info: Sequence[dict] = (),
                     log: Optional[Callable[[str], None]] = None) -> tuple:
  """Answers to `prompts` (in order), generating only those not in `cache`, `batch_size`
  prompts per `generator.generate` call; the cache is saved after every batch.

  Returns:
    `(answers, seconds spent generating, number generated)`.
  """
  keys = [cache_key(generator.name, max_new_tokens, p) for p in prompts]
  todo, seen = [], set()
  for i, k in enumerate(keys):  # a prompt that repeats is generated once
    if cache.get(k) is None and k not in seen:
      todo.append(i)
      seen.add(k)
  seconds = 0.0
  for start in range(0, len(todo), batch_size):
    batch = todo[start:start + batch_size]
    t0 = time.perf_counter()
    texts = generator.generate([prompts[i] for i in batch], max_new_tokens=max_new_tokens)
    seconds += time.perf_counter() - t0
    if len(texts) != len(batch):
      raise ValueError(f"the generator {generator.name!r} returned {len(texts)} answers for "
                       f"{len(batch)} prompts.")
    for i, text in zip(batch, texts):
      cache.put(keys[i], text, **(dict(info[i]) if info else {}))
    cache.save()
    if log is not None:
      done = min(start + batch_size, len(todo))
      log(f"generated {done}/{len(todo)} answers ({seconds:.0f} s, "
          f"{seconds / done:.1f} s per answer)")
  return [cache.get(k) for k in keys], seconds, len(todo)


def score(rows: Sequence[dict], answers: Sequence[str], examples: Sequence[QAExample]) -> list:
  """Per-question metrics: `rows` (from `select_contexts`) with each answer and its scores."""
  out = []
  for row, answer, ex in zip(rows, answers, examples):
    if row["id"] != ex.id:
      raise ValueError(f"rows and examples are not the same questions ({row['id']} vs {ex.id}).")
    golds = [a for a in ex.answers if a.strip()]
    scores = (jaxsel.contrib.answer_scores(answer, golds) if golds
              else {k: float("nan") for k in ANSWER_METRICS})
    out.append({**{k: v for k, v in row.items() if k != "prompt"}, "answer": answer,
                "gold": list(ex.answers), **scores})
  return out


def summarize(per_method: dict, *, baseline: str = "naive", n_resamples: int = 10_000,
              seed: int = 0) -> dict:
  """`{method: {metric: mean, metric + "_diff": CI of method - baseline}}` (no `_diff` for
  the baseline itself); NaN-aware."""
  out = {}
  base = per_method.get(baseline)
  for m, rows in per_method.items():
    s = {}
    for k in METRICS:
      v = np.asarray([r[k] for r in rows], np.float64)
      s[k] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
      if base is not None and m != baseline:
        w = np.asarray([r[k] for r in base], np.float64)
        s[k + "_diff"] = evaluation.paired_bootstrap(v, w, n_resamples=n_resamples,
                                                     seed=seed)._asdict()
    out[m] = s
  return out


def _ci(d: dict) -> str:
  return f"{d['mean'] * 100:+.1f} [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}]"


def markdown_table(summary: dict, *, baseline: str = "naive") -> str:
  """Means in % (tokens as they are); below the baseline's row, each other method's difference
  from it with the paired bootstrap 95% CI, in points."""
  head = ("| method | EM | F1 | ROUGE-1 | ROUGE-2 | ROUGE-L | gold recall | joint recall | tokens |\n"
          "|---|---|---|---|---|---|---|---|---|")
  lines = [head]
  pct = ANSWER_METRICS + ("recall", "joint_recall")
  for m, s in summary.items():
    cells = [f"{s[k] * 100:.1f}" for k in pct] + [f"{s['tokens']:.0f}"]
    lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
  for m, s in summary.items():
    if m == baseline:
      continue
    cells = [_ci(s[k + "_diff"]) for k in pct] + [f"{s['tokens_diff']['mean']:+.0f}"]
    lines.append(f"| Δ {LABELS.get(m, m)} − {LABELS.get(baseline, baseline)} | "
                 + " | ".join(cells) + " |")
  return "\n".join(lines)


# A line of a generated markdown section from which on the text is hand-written: a rewrite of
# the section keeps it (and what follows it, up to the next `## ` heading).
KEEP = "<!-- hand-written below: kept when the section is rewritten -->"


def write_section(path: str, heading: str, body: str) -> None:
  """Replaces the markdown section that starts with the line `heading` (up to the next `## `
  heading), or appends it; atomically. The old section's hand-written tail, from the line
  `KEEP` on, is kept after the new body."""
  text = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
  section = heading + "\n\n" + body.strip("\n") + "\n"
  start = text.find(heading + "\n")
  if start < 0:
    text = text.rstrip("\n") + "\n\n" + section
  else:
    nxt = text.find("\n## ", start + len(heading))
    old = text[start:nxt + 1 if nxt >= 0 else len(text)]
    keep = old.find(KEEP)
    if keep >= 0:
      section += "\n" + old[keep:].rstrip("\n") + "\n"
    text = text[:start] + section + ("\n" + text[nxt + 1:] if nxt >= 0 else "")
  atomic_write(path, text.encode("utf-8"))

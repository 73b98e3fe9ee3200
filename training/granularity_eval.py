"""One budget across granularities: whole paragraphs or their sentences (issue 36, part 1).

Per question set and candidate form (each paragraph one `jaxsel.Passage`, titled
``"title: paragraph"`` with `Passage.title`, or untitled; costs in all-MiniLM-L6-v2's word
pieces, the budget their sum, as `training/forms_eval.py` and `training/defaults_eval.py`
count; or *split*: each ``"title: paragraph"`` given as a document string, which the Pipeline
splits into pieces of at most 128 word pieces and whose context as sent, numbers and blank
lines included, the budget holds), at 128/256/384 tokens, four selections through
`jaxsel.Pipeline.select`:

* ``naive_p``: NaiveRAG over paragraphs (`method="naive"`);
* ``naive_s``: NaiveRAG over sentences (`method="naive"`, `granularity="sentence"`);
* ``default_p``: the default for a question (CORAG, scorer ``learned_hops``) over paragraphs;
* ``default_s``: the default with `granularity="sentence"`.

Metrics per question: ``sf`` supporting-fact joint recall (every supporting sentence of the
dataset wholly inside a sent piece; NaN for a set without sentence labels), ``aic`` the gold
answer occurs in the context as sent (`evaluation.answer_in_context`, NaN for yes/no), ``para``
paragraph joint recall (every gold paragraph has a piece in the context) and ``whole`` (every
gold paragraph sent whole), and ``tokens`` (the picks' own tokens, checked against the budget:
``over`` counts selections above it). Differences are paired bootstrap 95% CIs.

Sets: ``hotpot_hard`` (the first questions of `train/hotpotqa_hard`: HotpotQA with sentence
labels; the shipped learned weights were not trained on it), ``2wiki`` (sentence labels; the
shipped weights were trained on it, so pass leave-one-out weights: ``--weights
2wiki=out/gran/no_2wiki.safetensors``, trained by `python -m training train-hops` without it),
``musique`` (MuSiQue: gold paragraphs, no sentence labels; pass leave-one-out weights too:
``musique=out/gran/no_musique.safetensors``) and ``hotpot_test`` (the held-out split of
`qa_sets`; its file keeps no sentence labels): these two give only ``aic``, ``para`` and
``whole``. A set may also be a JSONL file's path (`qa_sets.is_file`: a set kept outside the
project); HotpotQA / 2Wiki-format lines give supporting facts, other formats ``aic``, ``para``
and ``whole``.

    python -m training granularity --limit 100 --out out/gran/granularity.json \\
        --weights 2wiki=out/gran/no_2wiki.safetensors,musique=out/gran/no_musique.safetensors
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import jaxsel  # noqa: E402
from jaxsel.contrib import hop_scorer as hops  # noqa: E402
from training.files import atomic_write  # noqa: E402
from training import context_eval, evaluation, hop_features, qa, qa_sets  # noqa: E402
from training.embedding_cache import CachedEncoder  # noqa: E402

SETS = ("hotpot_hard", "2wiki", "musique", "hotpot_test")
FORMS = hop_features.FORMS + ("split",)
BUDGETS = (128, 256, 384)
METHODS = {"naive_p": ("NaiveRAG, paragraphs", "naive", "passage"),
           "naive_s": ("NaiveRAG, sentences", "naive", "sentence"),
           "default_p": ("default, paragraphs", None, "passage"),
           "default_s": ("default, sentence granularity", None, "sentence")}
METRICS = ("sf", "aic", "para", "whole")
CACHE = os.path.join(ROOT, "out", "gran")
RAW = {"hotpot_hard": hop_features.HARD, "2wiki": qa_sets.FILES["2wiki"]}
LABELS = {"hotpot_hard": "HotpotQA-hard", "2wiki": "2Wiki", "musique": "MuSiQue",
          "hotpot_test": "HotpotQA test"}


def _joined_spans(sentences) -> tuple:
  """(paragraph, [(start, end)] of each sentence in it), joined as `qa._join_sentences` joins."""
  out, spans = "", []
  for s in sentences:
    if out and not s.startswith(" ") and not out.endswith(" "):
      out += " "
    spans.append((len(out), len(out) + len(s)))
    out += s
  lead = len(out) - len(out.lstrip())
  text = out.strip()
  fixed = []
  for a, b in spans:
    a, b = max(a - lead, 0), min(b - lead, len(text))
    while a < b and text[a].isspace():
      a += 1
    while b > a and text[b - 1].isspace():
      b -= 1
    fixed.append((a, b))
  return text, fixed


def supporting_spans(name: str, examples, form: str) -> list:
  """Per question, `[[(paragraph, start, end), ...] per supporting fact]` (a fact's sentence in
  every paragraph of its title, offsets in the passage text of `form`); None for a set without
  sentence labels. Facts naming a sentence a paragraph does not have are left out. A file set
  (`qa_sets.is_file`) has sentence labels where its lines are in the HotpotQA / 2Wiki format
  (`context` sentences and `supporting_facts`)."""
  if qa_sets.is_file(name):
    path = name
  elif name in RAW:
    path = os.path.join(qa_sets.DATA_ROOT, RAW[name])
  else:
    return [None] * len(examples)
  raw = {}
  with open(path, encoding="utf-8") as f:
    for line_no, line in enumerate(f, 1):  # ids as `qa.load_qa_jsonl` gives them
      if line.strip():
        obj = json.loads(line)
        raw[qa.parse_example(obj, line_no, path).id] = obj
  out = []
  for ex in examples:
    obj = raw[ex.id]
    if "context" not in obj or "supporting_facts" not in obj:
      out.append(None)
      continue
    facts = []
    for title, sid in obj["supporting_facts"]:
      where = []
      for i, (t, sents) in enumerate(obj["context"]):
        if t != title or not 0 <= sid < len(sents):
          continue
        text, spans = _joined_spans(sents)
        assert text == ex.passages[i], (ex.id, i)
        a, b = spans[sid]
        shift = len(f"{t}: ") if form == "titled" and ex.titles[i] else 0
        if b > a:
          where.append((i, a + shift, b + shift))
      if where:
        facts.append(where)
    out.append(facts)
  return out


def question_metrics(ex, res, facts, passages) -> dict:
  """The metrics of one selection `res` over the question's paragraphs `passages` (see the
  module docstring)."""
  picks = res.passages
  gold = [i for i, g in enumerate(ex.gold) if g]
  docs = {p.doc for p in picks}
  whole = {p.doc for p in picks if p.start == 0 and p.end == len(passages[p.doc].text)}

  def covered(fact):
    return any(p.doc == i and p.start <= a and p.end >= b for p in picks for i, a, b in fact)

  return {"sf": float("nan") if facts is None else float(all(covered(f) for f in facts)),
          "aic": evaluation.answer_in_context(res.context(numbered=False), ex.answers),
          "para": float(all(d in docs for d in gold)),
          "whole": float(all(d in whole for d in gold)),
          "tokens": float(sum(p.tokens for p in picks))}


def encoder_for(name: str, form: str, base, cache: str) -> CachedEncoder:
  """A `CachedEncoder` in `cache`, started from the paragraph embeddings other evaluations
  cached (`out/hops`) when there are some."""
  path = os.path.join(cache, f"emb_{qa_sets.cache_tag(name)}_{form}.npz")
  seed = os.path.join(hop_features.CACHE, os.path.basename(path))
  if not os.path.exists(path) and os.path.exists(seed):
    os.makedirs(cache, exist_ok=True)
    shutil.copyfile(seed, path)
  return CachedEncoder(base, path)


def run_set(name: str, form: str, *, base, cache: str, limit, weights=None,
            budgets=BUDGETS, methods=tuple(METHODS), log=print, widening: float = 0.0,
            menu=None) -> dict:
  """`{method: {budget: {metric: [Q]}}}`, `n` and `over` (selections above their budget).
  `widening`: the Pipeline's CORAG widening (`PipelineConfig.widening`). `menu`: other
  configurations than `METHODS`, `{name: (Pipeline settings, granularity)}`; with `weights`, a
  CORAG search with the learned scorer (the default's) uses those weights."""
  examples = hop_features.load_examples(name, limit=limit)
  split = form == "split"  # documents: the titled paragraphs as strings
  paragraphs = "titled" if split else form  # the passages' form (and embedding cache)
  facts = supporting_spans(name, examples, paragraphs)
  enc = encoder_for(name, paragraphs, base, cache)
  pipe = jaxsel.Pipeline(enc, cache_size=64).replace(widening=widening)
  scorer = hops.learned_hops_builder(hops.load_hop_params(weights)) if weights else None
  if menu is None:
    menu = {m: ({"method": METHODS[m][1]}, METHODS[m][2]) for m in methods}
  pipes, granularity = {}, {}
  for m, (settings, granularity[m]) in menu.items():
    settings = dict(settings)
    learned = settings.get("corag_scorer", pipe.config.corag_scorer) == "learned_hops"
    if scorer is not None and settings.get("method") in (None, "corag") and learned:
      settings.update(method="corag", corag_scorer=scorer)  # leave-one-out weights
    pipes[m] = pipe.replace(**settings)
  out = {m: {b: {k: [] for k in (*METRICS, "tokens")} for b in budgets} for m in menu}
  over, t0 = 0, time.time()
  for q, (ex, f) in enumerate(zip(examples, facts)):
    passages = hop_features.paragraph_passages(ex, paragraphs, enc.tokenizer)
    source = [p.text for p in passages] if split else passages
    for m in menu:
      for b in budgets:
        res = pipes[m].select(ex.question, source, budget=b, granularity=granularity[m])
        for p in res.passages:
          assert passages[p.doc].text[p.start:p.end] == p.text
        row = question_metrics(ex, res, f, passages)
        over += int(row["tokens"] > b)
        for k, v in row.items():
          out[m][b][k].append(v)
    if q % 20 == 19:
      enc.save()
      log(f"  {name} {form}: {q + 1} questions, {time.time() - t0:.0f}s", flush=True)
  enc.save()
  log(f"{name} {form}: {len(examples)} questions in {time.time() - t0:.0f}s", flush=True)
  return {"n": len(examples), "over": over, "per_question": out,
          "weights": weights or "shipped"}


def summary(res: dict, budgets=BUDGETS) -> dict:
  """Means (%) per method, budget and metric, and each method's difference from the better
  NaiveRAG (by that metric's mean) with its CI."""
  out = {}
  for b in budgets:
    per = {m: res["per_question"][m][b] for m in METHODS}
    row = {}
    for k in METRICS:
      v = {m: np.asarray(per[m][k], float) for m in METHODS}
      if not np.isfinite(v["naive_p"]).any():
        continue
      best = max(("naive_p", "naive_s"), key=lambda m: np.nanmean(v[m]))
      row[k] = {m: float(np.nanmean(v[m]) * 100) for m in METHODS}
      row[k]["best_naive"] = best
      for m in ("default_p", "default_s"):
        row[k][m + "_diff"] = context_eval.ci(v[m], v[best])._asdict()
    out[str(b)] = row
  return out


def markdown(report: dict) -> list:
  lines = ["Per set (questions) and form: % of questions; Δ = the default at sentence "
           "granularity minus the better NaiveRAG (paragraphs or sentences) on that metric, "
           "[95% paired bootstrap CI].", "",
           "| set | form | budget | metric | NaiveRAG ¶ | NaiveRAG sent. | default ¶ | default sent. "
           "| Δ vs better NaiveRAG |", "|---" * 9 + "|"]
  names = {"sf": "supporting-fact joint", "aic": "answer in context", "para": "paragraph joint",
           "whole": "gold paragraphs whole"}
  for key, r in report.items():
    name, form = key.split(":")
    for b, row in r["summary"].items():
      for k in ("sf", "aic", "para"):
        if k not in row:
          continue
        c = row[k]
        lines.append(f"| {LABELS.get(name) or qa_sets.label(name)} ({r['n']}) | {form} | {b} | "
                     f"{names[k]} | {c['naive_p']:.1f} | {c['naive_s']:.1f} | {c['default_p']:.1f}"
                     f" | {c['default_s']:.1f} | {context_eval.fmt_ci(c['default_s_diff'])} |")
  return lines


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sets", default=",".join(SETS))
  p.add_argument("--forms", default=",".join(FORMS))
  p.add_argument("--limit", type=int, default=100, help="first N questions of each set")
  p.add_argument("--weights", default="", help="SET=path,...: learned weights trained without SET")
  p.add_argument("--methods", default=",".join(METHODS), help="a probe: only these (no table)")
  p.add_argument("--widening", type=float, default=0.0,
                 help="CORAG's progressive widening on requests of > 40 candidates (0: off)")
  p.add_argument("--cache", default=CACHE)
  p.add_argument("--out", default=os.path.join(CACHE, "granularity.json"))
  args = p.parse_args(argv)
  weights = dict(kv.split("=", 1) for kv in args.weights.split(",") if kv)
  base = jaxsel.load_encoder(hop_features.ENCODER)
  report = {}
  if os.path.exists(args.out):
    with open(args.out, encoding="utf-8") as f:
      report = json.load(f)
  for name in args.sets.split(","):
    for form in args.forms.split(","):
      key = f"{name}:{form}"
      if key in report and report[key]["n"] == args.limit and \
          report[key]["weights"] == weights.get(name, "shipped") and \
          report[key].get("widening", 0.0) == args.widening and \
          report[key].get("jaxsel_source") == context_eval.code_fingerprint():
        continue  # already run by this jaxsel source: resumable
      methods = tuple(args.methods.split(","))
      res = run_set(name, form, base=base, cache=args.cache, limit=args.limit,
                    weights=weights.get(name), methods=methods, widening=args.widening)
      if methods != tuple(METHODS):  # a probe: the means only
        print(key, {m: {b: {k: round(float(np.nanmean(v)) * 100, 1) for k, v in per.items()}
                        for b, per in res["per_question"][m].items()} for m in methods}, flush=True)
        continue
      res["per_question"] = {m: {str(b): v for b, v in per.items()}
                             for m, per in res["per_question"].items()}
      res["widening"] = args.widening
      res["jaxsel_source"] = context_eval.code_fingerprint()
      report[key] = res
      res["summary"] = summary({"per_question": {m: {int(b): v for b, v in per.items()}
                                                 for m, per in res["per_question"].items()}})
      os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
      atomic_write(args.out, json.dumps(report).encode("utf-8"))
      print("\n".join(markdown({key: res})[4:]), flush=True)
  print("\n".join(markdown(report)))
  return 0


if __name__ == "__main__":
  sys.exit(main())

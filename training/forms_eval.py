"""Selection through `jaxsel.Pipeline` with whole paragraphs as `Passage`s, titled and untitled.

The form the framework adapters produce: each paragraph of a question is one `jaxsel.Passage`
(`training/hop_features.paragraph_passages`), either `"title: paragraph"` with `Passage.title`
set, or the bare paragraph with no title anywhere. Per question, method and budget:
`pipe.select(question, passages, budget=B)`; the picks are stored (`context_eval.RunStore`,
resumable) and scored by `context_eval.question_metrics` (a paragraph is one piece here, so
*strict* joint recall, every gold paragraph picked whole, equals joint recall of any piece).

Methods (`METHODS`): NaiveRAG, the bridge scorer (the default before the learned scorer), and
the learned second-hop scorer. For a leave-one-dataset-out row, the learned scorer's weights
come from a model trained without that dataset (`--weights SET=path.safetensors`). A set may
be a JSONL file's path (`qa_sets.is_file`): a set kept outside the project, in the HotpotQA,
2Wiki, MuSiQue or IRCoT format; the shipped weights never saw it.

    python -m training forms --sets hotpot_test,musique,2wiki \\
        --weights musique=out/hops/no_musique.safetensors,2wiki=out/hops/no_2wiki.safetensors
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import jaxsel  # noqa: E402
from training.files import atomic_savez, atomic_write, file_sha256  # noqa: E402
from jaxsel.contrib import hop_scorer as hops  # noqa: E402
from training import context_eval, hop_features, hop_search, qa_sets  # noqa: E402

BUDGETS = (128, 256, 384)
# Candidate forms: whole paragraphs as titled / untitled `Passage`s, or "title: paragraph"
# documents split by the Pipeline (pieces of ≤ 128 word pieces; embeddings shared with "titled").
FORMS = hop_features.FORMS + ("split",)
FORM_LABELS = {"titled": "whole paragraphs, titled", "untitled": "whole paragraphs, no titles",
               "split": "documents split by the Pipeline"}
METHODS = {
    "naive": ("NaiveRAG", {"method": "naive"}),
    "bridge": ("CORAG bridge (+ top-up)", {"method": "corag", "corag_scorer": "bridge"}),
    "hops": ("CORAG hops, untrained (+ top-up)", {"method": "corag", "corag_scorer": "hops"}),
    "learned_hops": ("CORAG learned_hops (+ top-up)", {"method": "corag", "corag_scorer": "learned_hops"}),
}


def run_set(name: str, form: str, *, base, cache: str, limit=None, weights=None,
            methods_=tuple(METHODS), budgets=BUDGETS, log=print) -> dict:
  """Runs and scores one set in one form; -> `{budget: {method: {metric: [Q]}}}` plus `n`."""
  examples = hop_features.load_examples(name, limit=limit)
  enc = hop_features.encoder_for(name, "titled" if form == "split" else form, cache=cache, base=base)
  pipe = jaxsel.Pipeline(enc, cache_size=64)
  pipes, settings = {}, {}
  for m in methods_:
    cfg = dict(METHODS[m][1])
    settings[m] = {**cfg, **context_eval.scorer_settings(cfg.get("corag_scorer"))}
    if m == "learned_hops":
      path = weights or hops.WEIGHTS
      cfg["corag_scorer"] = hops.learned_hops_builder(hops.load_hop_params(path))
      settings[m]["weights_sha256"] = file_sha256(path)
    pipes[m] = pipe.replace(**cfg)
  tag = "" if limit is None else f"_first{limit}"
  store = context_eval.RunStore(os.path.join(cache, f"runs_{qa_sets.cache_tag(name)}_{form}{tag}.json"))
  t0 = time.time()
  if form == "split":
    context_eval.run_pipelines(pipes, examples, store, budgets=budgets, settings=settings)
  else:
    inputs = {ex.id: hop_features.paragraph_passages(ex, form, enc.tokenizer) for ex in examples}
    context_eval.run_pipelines(pipes, examples, store, budgets=budgets, settings=settings,
                               candidates=lambda ex: inputs[ex.id])
  enc.save()
  log(f"{name} {form}: {len(examples)} questions in {time.time() - t0:.0f}s")
  out = {"n": len(examples)}
  for b in budgets:
    out[b] = {m: context_eval.stored_metrics(store, examples, m, b) for m in pipes}
    out[b]["oracle"] = context_eval.oracle_metrics(store, examples, b, "paragraph")
  return out


def run_batched(name: str, form: str, *, base, cache: str, limit=None, weights=None,
                methods_=tuple(METHODS), budgets=BUDGETS, log=print) -> dict:
  """`run_set` for the whole-paragraph forms through the Pipeline's compiled solve batched over
  the questions (`training/hop_search.py`: the same padding, request, scorer, search and top-up
  as `select`; NaiveRAG in NumPy), for machines where one `select` per question is too slow."""
  feats = hop_features.load(name, form, cache=cache, base=base, limit=limit)
  enc = hop_features.encoder_for(name, form, cache=cache, base=base)
  t0 = time.time()
  out = {"n": len(feats)}
  nan = np.full(len(feats), np.nan)
  for b in budgets:
    out[b] = {"oracle": hop_search.oracle(feats, budget=b)}
    for m in methods_:
      if m == "naive":
        picks = hop_search.naive(feats, budget=b)
      else:
        scorer = METHODS[m][1]["corag_scorer"]
        if m == "learned_hops":
          scorer = hops.learned_hops_builder(hops.load_hop_params(weights or hops.WEIGHTS))
        picks = hop_search.select(feats, scorer, encoder=enc, budget=b)
      strict = hop_search.strict_joint(feats, picks)
      out[b][m] = {"strict": strict, "joint": strict, "recall": hop_search.recall(feats, picks),
                   "ms": nan}
  log(f"{name} {form}: {len(feats)} questions, batched, in {time.time() - t0:.0f}s")
  return out


REFERENCE = os.path.join(ROOT, "tests", "data", "hop_scorer_reference.json")


def reference_record(name: str = "hotpot_test", form: str = "untitled", *, base, n: int = 8,
                     budget: int = 256) -> dict:
  """The shipped learned scorer's picks on the first `n` questions of `name` in `form`, with the
  questions' texts, so a test can recompute them offline with the real encoder
  (`tests/scorers/test_hops.py`): `pipe.select_many` with `corag_scorer="learned_hops"` (the
  default search settings and top-up), NaiveRAG beside it, strict joint recall of both."""
  examples = hop_features.load_examples(name, limit=n)
  inputs = [(ex.question, hop_features.paragraph_passages(ex, form, base.tokenizer)) for ex in examples]
  out = {"set": name, "form": form, "budget": budget, "encoder": hop_features.ENCODER,
         "weights_sha256": file_sha256(hops.WEIGHTS), "questions": []}
  pipes = {m: jaxsel.Pipeline(base, **METHODS[m][1]) for m in ("naive", "learned_hops")}
  picks = {m: [[ps.index(p) for p in r.passages] for (_, ps), r in
               zip(inputs, pipe.select_many(inputs, budget=budget))] for m, pipe in pipes.items()}
  for i, ex in enumerate(examples):
    out["questions"].append({"id": ex.id, "question": ex.question, "titles": list(ex.titles),
                             "paragraphs": list(ex.passages), "gold": [bool(g) for g in ex.gold],
                             **{f"picks_{m}": picks[m][i] for m in pipes}})
  for m in pipes:
    out[f"strict_{m}"] = float(np.mean([all(j in q[f"picks_{m}"] for j, g in enumerate(q["gold"]) if g)
                                        for q in out["questions"]]))
  return out


def summary(res: dict, budgets=BUDGETS, *, n_resamples: int = 10_000) -> dict:
  """Means in % and paired bootstrap CIs of the difference from NaiveRAG (strict joint)."""
  out = {"n": res["n"]}
  for b in budgets:
    per = res[b]
    row = {"naive": float(np.mean(per["naive"]["strict"]) * 100),
           "naive_any": float(np.mean(per["naive"]["joint"]) * 100),
           "oracle_room": float((np.mean(per["oracle"]) - np.mean(per["naive"]["strict"])) * 100)}
    for m in per:
      if m in ("naive", "oracle"):
        continue
      row[m] = float(np.mean(per[m]["strict"]) * 100)
      row[m + "_diff"] = context_eval.ci(per[m]["strict"], per["naive"]["strict"],
                                         n_resamples=n_resamples)._asdict()
      row[m + "_any"] = float(np.mean(per[m]["joint"]) * 100)
      row[m + "_any_diff"] = context_eval.ci(per[m]["joint"], per["naive"]["joint"],
                                             n_resamples=n_resamples)._asdict()
      row[m + "_ms"] = float(np.median(per[m]["ms"]))
    out[b] = row
  return out


def forms_markdown(report: dict, budgets=BUDGETS, methods_=("bridge", "hops", "learned_hops")) -> list:
  """One table per budget: a row per (set, candidate form); strict joint recall (every gold
  paragraph picked whole) with Δ vs NaiveRAG [95% paired bootstrap CI], any-piece beside it."""
  lines = []
  for b in budgets:
    lines += [f"#### Budget {b} tokens: strict joint recall % (Δ vs NaiveRAG [95% CI]); any piece in brackets", "",
              "| set (questions) | candidates | NaiveRAG | " + " | ".join(
                  f"{METHODS[m][0]} Δ" for m in methods_) + " | oracle room |",
              "|---" * (4 + len(methods_)) + "|"]
    for key, r in report.items():
      name, form = key.split(":")
      row = r[str(b)] if str(b) in r else r[b]
      cells = []
      for m in methods_:
        if m not in row:
          cells.append("–")
          continue
        cells.append(f"{row[m]:.1f} ({context_eval.fmt_ci(row[m + '_diff'])})" + (
            f" [any {row[m + '_any']:.1f}, Δ {row[m + '_any_diff']['mean']:+.1f}]" if form == "split" else ""))
      naive = f"{row['naive']:.1f}" + (f" [any {row['naive_any']:.1f}]" if form == "split" else "")
      lines.append(f"| {hop_features.label(name)} ({r['n']}) | {FORM_LABELS[form]} | {naive} | "
                   + " | ".join(cells) + f" | {row['oracle_room']:+.1f} |")
    lines.append("")
  return lines


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sets", default="hotpot_test,musique,2wiki")
  p.add_argument("--forms", default=",".join(FORMS))
  p.add_argument("--methods", default=",".join(METHODS))
  p.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
  p.add_argument("--limit", default=None, help="N, or SET=N,SET=N: first questions only")
  p.add_argument("--weights", default="", help="SET=path,...: learned weights per set (default shipped)")
  p.add_argument("--cache", default=hop_features.CACHE)
  p.add_argument("--out", default=os.path.join(ROOT, "out", "hops", "forms.json"))
  p.add_argument("--record", default=None, metavar="FILE",
                 help="only write the shipped learned scorer's picks on the first 8 HotpotQA test "
                      f"questions (untitled, 256 tokens) to FILE, the test's reference ({REFERENCE})")
  p.add_argument("--per-question", default=None, metavar="FILE.npz",
                 help="also write each question's strict joint recall (`SET:FORM:BUDGET:METHOD` arrays)")
  p.add_argument("--against", default=None, metavar="FILE.npz",
                 help="an earlier run's --per-question file (e.g. at another commit): print each "
                      "method's paired difference per set, form and budget (questions gained / lost)")
  p.add_argument("--batched", action="store_true",
                 help="whole-paragraph forms through the batched compiled solve (hop_search)")
  args = p.parse_args(argv)
  weights = dict(kv.split("=", 1) for kv in args.weights.split(",") if kv)
  limits = {}
  if args.limit:
    for kv in args.limit.split(","):
      k, _, v = kv.rpartition("=")
      limits[k or "*"] = int(v)
  budgets = [int(b) for b in args.budgets.split(",")]
  base = jaxsel.load_encoder(hop_features.ENCODER)
  if args.record:
    rec = reference_record(base=base)
    atomic_write(args.record, json.dumps(rec, indent=1).encode("utf-8"))
    print(f"{args.record}: learned_hops {rec['strict_learned_hops']:.3f}, naive {rec['strict_naive']:.3f}")
    return 0
  report, per = {}, {}
  for name in args.sets.split(","):
    for form in args.forms.split(","):
      run = run_batched if args.batched and form != "split" else run_set
      res = run(name, form, base=base, cache=args.cache, limit=limits.get(name, limits.get("*")),
                    weights=weights.get(name), methods_=args.methods.split(","), budgets=budgets)
      report[f"{name}:{form}"] = s = summary(res, budgets)
      per.update({f"{name}:{form}:{b}:{m}": np.asarray(res[b][m]["strict"], np.float32)
                  for b in budgets for m in res[b] if m != "oracle"})
      for b in budgets:
        r = s[b]
        print(f"{name:12s} {form:8s} B={b}: naive {r['naive']:.1f} room {r['oracle_room']:+.1f} | " + " | ".join(
            f"{m} {r[m]:.1f} ({context_eval.fmt_ci(r[m + '_diff'])})"
            for m in args.methods.split(",") if m != "naive"), flush=True)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  atomic_write(args.out, json.dumps(report, indent=1).encode("utf-8"))
  if args.per_question:
    atomic_savez(args.per_question, **per)
  if args.against:
    print("\n".join(paired_lines(per, dict(np.load(args.against)))))
  return 0


def paired_lines(now: dict, before: dict) -> list:
  """Markdown rows comparing two `--per-question` runs key by key (`SET:FORM:BUDGET:METHOD`,
  the keys both have, same questions): means, questions gained and lost, paired 95% CI."""
  lines = ["| set | form | budget | method | before | now | gained / lost | Δ [95% CI] |",
           "|---|---|---|---|---:|---:|---|---|"]
  for key in now:
    if key not in before:
      continue
    a, b = np.asarray(now[key], float), np.asarray(before[key], float)
    if a.shape != b.shape:
      raise ValueError(f"--against: {key} has {b.shape[0]} questions there, {a.shape[0]} here; "
                       f"run both with the same --limit.")
    name, form, budget, m = key.split(":")
    lines.append(f"| {hop_features.label(name)} | {form} | {budget} | {m} | {b.mean() * 100:.1f} | "
                 f"{a.mean() * 100:.1f} | +{int((a > b).sum())} / -{int((a < b).sum())} | "
                 f"{context_eval.fmt_ci(context_eval.ci(a, b))} |")
  return lines


if __name__ == "__main__":
  sys.exit(main())

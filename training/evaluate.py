"""Evaluate context-selection methods on held-out multi-hop questions.

Methods: NaiveRAG, MMR, facility location, saturated coverage, CORAG with a fixed scorer and
settings, CORAG with the configuration agent, exhaustive search up to 4 passages, and the
gold oracle, at several token budgets. Metrics (see `training/evaluation.py`): gold-passage recall,
joint recall, answer string in the context, ROUGE-L against the gold passages, tokens used,
latency per query (batched, compiled), with paired bootstrap 95% CIs of each method's
difference from NaiveRAG. Writes JSON and, with `--readme`, the markdown table into the
`## Evaluation` section of `bench/README.md`.

    python training/evaluate.py --agent out/agent --readme bench/README.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # `training` is a folder of the repository, not an installed package

import jaxsel  # noqa: E402
from jaxsel._src.io import atomic_write  # noqa: E402
from training import qa, qa_eval  # noqa: E402

DEFAULT_DATA = os.path.join(ROOT, "..", "shared", "data", "hotpotqa", "dev_subsampled.jsonl")
ALL_METHODS = ("naive", "mmr", "facility_location", "saturated_coverage", "corag_fixed",
               "corag_agent", "exhaustive", "oracle")
LABELS = {"naive": "NaiveRAG", "mmr": "MMR", "facility_location": "facility location",
          "saturated_coverage": "saturated coverage", "corag_fixed": "CORAG (fixed)",
          "corag_agent": "CORAG + agent", "exhaustive": "exhaustive ≤4", "oracle": "gold oracle"}
SECTION = "## Evaluation"


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--data", default=DEFAULT_DATA)
  p.add_argument("--split", choices=("train", "held_out", "all"), default="held_out")
  p.add_argument("--n-train", type=int, default=300)
  p.add_argument("--split-seed", type=int, default=0)
  p.add_argument("--limit", type=int, default=None)
  p.add_argument("--encoder", default="sentence-transformers/all-MiniLM-L6-v2")
  p.add_argument("--agent", default=os.path.join(ROOT, "out", "agent"),
                 help="trained agent folder (skip 'corag_agent' if it does not exist)")
  p.add_argument("--extra-agents", default="",
                 help="comma-separated NAME=FOLDER agents evaluated as extra 'CORAG + agent (NAME)' rows")
  p.add_argument("--methods", default=",".join(ALL_METHODS))
  p.add_argument("--budgets", default="128,256,384")
  p.add_argument("--scorer", default="mentions_links", help="scorer of CORAG (fixed) and exhaustive")
  p.add_argument("--iterations", type=int, default=15)
  p.add_argument("--cost-penalty", type=float, default=0.2)
  p.add_argument("--exploration", type=float, default=2.0)
  p.add_argument("--max-depth", type=int, default=6)
  p.add_argument("--resamples", type=int, default=10_000)
  p.add_argument("--features", default=None, help="cache of the question features (.npz)")
  p.add_argument("--out", default=os.path.join(ROOT, "out", "evaluation.json"))
  p.add_argument("--readme", default=None, help="write the table into this markdown file's section")
  p.add_argument("--no-progress", action="store_true")
  return p.parse_args(argv)


def _fmt_ci(d: dict, scale: float = 100.0, digits: int = 1) -> str:
  return (f"{d['mean'] * scale:+.{digits}f} [{d['low'] * scale:+.{digits}f}, "
          f"{d['high'] * scale:+.{digits}f}]")


def markdown_table(results: dict, *, n_questions: int, command: str) -> str:
  lines = [SECTION, "",
           f"Held-out HotpotQA questions (n = {n_questions}), all-MiniLM-L6-v2 embeddings of "
           "`title: paragraph`, word-piece token costs. Recall, joint recall (every gold passage "
           "selected), answer-in-context (yes/no answers excluded) and ROUGE-L in %, tokens "
           "used, latency per query (batched, compiled, this machine's CPU). Brackets: paired "
           "bootstrap 95% CI of the difference from NaiveRAG, in points.", "",
           f"Reproduce: `{command}`", ""]
  for budget, per in results.items():
    lines += [f"### Budget {float(budget):g} tokens", "",
              "| method | recall | joint recall | Δ joint vs NaiveRAG | answer in ctx | ROUGE-L | Δ ROUGE-L | tokens | ms/query |",
              "|---|---|---|---|---|---|---|---|---|"]
    for m, s in per.items():
      dj = _fmt_ci(s["joint_recall_diff"]) if "joint_recall_diff" in s else "—"
      dr = _fmt_ci(s["rouge_l_diff"]) if "rouge_l_diff" in s else "—"
      label = LABELS.get(m) or LABELS["corag_agent"] + m[len("corag_agent"):]
      lines.append(f"| {label} | {s['recall'] * 100:.1f} | {s['joint_recall'] * 100:.1f} | {dj} "
                   f"| {s['answer_in_context'] * 100:.1f} | {s['rouge_l'] * 100:.1f} | {dr} "
                   f"| {s['tokens']:.0f} | {s['latency_ms']:.2f} |")
    lines.append("")
  return "\n".join(lines)


def write_section(path: str, section: str) -> None:
  """Replaces (or appends) the `## Evaluation` section of a markdown file, atomically."""
  text = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
  start = text.find(SECTION + "\n")
  if start < 0:
    text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
  else:
    nxt = text.find("\n## ", start + len(SECTION))
    end = len(text) if nxt < 0 else nxt + 1
    text = text[:start] + section.rstrip("\n") + "\n" + ("\n" + text[end:] if nxt >= 0 else "")
  atomic_write(path, text.encode("utf-8"))


def main(argv=None) -> int:
  args = parse_args(argv)

  examples = qa.load_split(args.data, split=args.split, n_train=args.n_train, seed=args.split_seed,
                           limit=args.limit)
  n_max = max(len(e.passages) for e in examples)
  cache = qa.FeatureCache(args.features, encoder=args.encoder, n_max=n_max) if args.features else None
  feats = cache.get(examples) if cache is not None else None
  if feats is None:
    encoder = jaxsel.load_encoder(args.encoder)
    if cache is not None:
      cache.ensure(encoder, examples)
      feats = cache.get(examples)
    else:
      feats = qa.featurize(encoder, examples, n_max=n_max)
  methods = [m for m in args.methods.split(",") if m]
  agent = None
  if "corag_agent" in methods:
    if os.path.isdir(args.agent):
      agent = jaxsel.load_agent(args.agent)
    else:
      print(f"no agent at {args.agent}; skipping corag_agent", file=sys.stderr)
      methods.remove("corag_agent")
  budgets = [float(b) for b in args.budgets.split(",")]
  t0 = time.time()
  results = qa_eval.evaluate_methods(
      examples, feats, methods=methods, budgets=budgets, n_resamples=args.resamples, progress=not args.no_progress,
      max_depth=args.max_depth, scorer=args.scorer, iterations=args.iterations,
      cost_penalty=args.cost_penalty, exploration=args.exploration, agent=agent)
  for spec in [x for x in args.extra_agents.split(",") if x]:
    name, _, path = spec.partition("=")
    extra = qa_eval.evaluate_methods(
        examples, feats, methods=["naive", "corag_agent"], budgets=budgets, n_resamples=args.resamples,
        progress=not args.no_progress, max_depth=args.max_depth, agent=jaxsel.load_agent(path))
    for b in budgets:
      results[b][f"corag_agent ({name})"] = extra[b]["corag_agent"]
  report = {"n_questions": len(examples), "split": args.split, "budgets": budgets,
            "settings": {k: getattr(args, k) for k in ("scorer", "iterations", "cost_penalty",
                                                     "exploration", "max_depth", "encoder")},
            "agent": args.agent if agent is not None else None, "seconds": time.time() - t0,
            "results": {str(b): r for b, r in results.items()}}
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  atomic_write(args.out, json.dumps(report, indent=2).encode("utf-8"))
  cmd = "python training/evaluate.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
  table = markdown_table(results, n_questions=len(examples), command=cmd.strip())
  print(table)
  if args.readme:
    write_section(args.readme, table)
  return 0


if __name__ == "__main__":
  sys.exit(main())

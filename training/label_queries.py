"""Label training questions for the configuration agent: the best scorer and search settings.

For each question, run the CORAG search with every scorer of the menu over a grid of
settings, score each selection against the gold passages (ROUGE-L + gold recall; or, with
`--label-by answers`, by a generator's answer from it against the gold answers), and keep
the best scorer and settings (`training/labels.py`: `sweep_batch`, `finalize_labels`). Writes a JSONL of labels (one row
per question, with `keep` marking those whose best scorer beats the second best by more than
`--margin`) and `query_embeddings.npz` (the referenced query embeddings) next to it.

Resumable: questions already in the output are skipped; every chunk of questions is written
atomically (temp file + rename), so an interrupted run loses at most one chunk.

    python -m training label --out out/labels/labels.jsonl            # 300 train questions
    python -m training label --limit 8 --iterations 5 --out /tmp/l.jsonl   # smoke test
    python -m training label --label-by answers --out out/labels_answers/labels.jsonl
                                     # the paper's protocol: quality = F1 + ROUGE-L of the offline
                                     # SmolLM2's answer from each distinct selection (--generator)
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
from training.files import atomic_savez  # noqa: E402
from training import answers, labels, qa  # noqa: E402

DEFAULT_DATA = os.path.join(ROOT, "..", "shared", "data", "hotpotqa", "dev_subsampled.jsonl")


def _floats(s: str) -> tuple:
  return tuple(float(x) for x in s.split(",") if x.strip())


def _ints(s: str) -> tuple:
  return tuple(int(x) for x in s.split(",") if x.strip())


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--data", default=DEFAULT_DATA, help="QA JSONL (IRCoT format or question/passages)")
  p.add_argument("--split", choices=("train", "held_out", "all"), default="train",
                 help="which part of the seeded id split to label (default: train)")
  p.add_argument("--n-train", type=int, default=300, help="questions in the train split")
  p.add_argument("--split-seed", type=int, default=0)
  p.add_argument("--limit", type=int, default=None, help="label at most this many questions")
  p.add_argument("--encoder", default="sentence-transformers/all-MiniLM-L6-v2")
  p.add_argument("--scorers", default=",".join(labels.SCORERS),
                 help=f"comma-separated scorer names (available: {', '.join(labels.SCORERS)}; "
                      "plus 'embedding', and 'cross_encoder' with --cross-encoder)")
  p.add_argument("--cross-encoder", default=None, help="cross-encoder checkpoint folder or hub id")
  p.add_argument("--budget", type=float, default=256.0, help="token budget")
  p.add_argument("--iterations", type=_ints, default=labels.PAPER_ITERATIONS)
  p.add_argument("--cost-penalty", type=_floats, default=labels.PAPER_COST_PENALTY)
  p.add_argument("--exploration", type=_floats, default=labels.PAPER_EXPLORATION)
  p.add_argument("--max-depth", type=int, default=6, help="most passages in a selection")
  p.add_argument("--margin", type=float, default=0.10, help="keep if best > (1 + margin) * second best")
  p.add_argument("--tie-tolerance", type=float, default=0.0,
                 help="scorers within this relative quality of the best count as tied (label: the one best on average)")
  p.add_argument("--chunk", type=int, default=50, help="questions per batch (and per atomic write)")
  p.add_argument("--out", default=os.path.join(ROOT, "out", "labels", "labels.jsonl"))
  p.add_argument("--features", default=None,
                 help="cache of question features (.npz from qa.save_features; written if missing)")
  p.add_argument("--no-progress", action="store_true")
  g = p.add_argument_group("labelling by generated answers (the CORAG paper's protocol)")
  g.add_argument("--label-by", choices=("gold", "answers"), default="gold",
                 help="a selection's quality: ROUGE-L + recall against the gold passages (default), "
                      "or F1 + ROUGE-L of a generator's answer from it against the gold answers")
  which = g.add_mutually_exclusive_group()
  which.add_argument("--generator", default=None,
                     help="answer model folder or hub id (default: the offline SmolLM2-135M-Instruct)")
  which.add_argument("--gguf", default=None, help="a GGUF answer model file")
  g.add_argument("--max-new-tokens", type=int, default=32)
  g.add_argument("--answer-cache", default=None,
                 help="generated answers (JSON, resumable; default: answers.json next to --out)")
  args = p.parse_args(argv)
  if args.label_by != "answers" and (args.generator or args.gguf or args.answer_cache):
    p.error("--generator, --gguf and --answer-cache apply to --label-by answers")
  return args


def main(argv=None) -> int:
  args = parse_args(argv)

  examples = qa.load_split(args.data, split=args.split, n_train=args.n_train, seed=args.split_seed,
                           limit=args.limit)
  scorers = [s for s in args.scorers.split(",") if s]
  builders = {}  # the model scorers; the registry's are built by name
  model_scorers = [s for s in scorers if s in ("embedding", "cross_encoder")]
  encoder = None  # loaded only when something needs embedding (cached features do not)
  ce = None
  if model_scorers:
    if "cross_encoder" in model_scorers:
      if args.cross_encoder is None:
        raise SystemExit("scorer 'cross_encoder' needs --cross-encoder PATH")
      ce = jaxsel.load_cross_encoder(args.cross_encoder)
    encoder = jaxsel.load_encoder(args.encoder)
    builders.update(labels.model_scorer_builders(encoder, cross_encoder=ce))
  unknown = [s for s in scorers if s not in builders and s not in labels.SCORERS]
  if unknown:
    raise SystemExit(f"unknown scorer(s) {unknown}; available: "
                     f"{', '.join(labels.SCORERS + ('embedding', 'cross_encoder'))}")
  grid = labels.LabelGrid(args.iterations, args.cost_penalty, args.exploration)
  quality_fn = None
  if args.label_by == "answers":
    generator = jaxsel.load_generator(args.gguf or args.generator)
    cache_path = args.answer_cache or os.path.join(os.path.dirname(os.path.abspath(args.out)), "answers.json")
    quality_fn = labels.AnswerQuality(generator, cache=answers.AnswerCache(cache_path),
                                      max_new_tokens=args.max_new_tokens,
                                      log=None if args.no_progress else (lambda m: print(m, file=sys.stderr)))

  out_dir = os.path.dirname(os.path.abspath(args.out))
  os.makedirs(out_dir, exist_ok=True)
  emb_path = os.path.join(out_dir, "query_embeddings.npz")
  rows = labels.read_labels(args.out)
  if rows and (rows[0].get("scorers") != scorers or rows[0].get("run", {}).get("budget") != args.budget
               or rows[0].get("run", {}).get("label_by", "gold") != args.label_by):
    raise SystemExit(f"{args.out} was labelled with other scorers, budget or --label-by "
                     f"({rows[0].get('scorers')}, {rows[0].get('run', {}).get('budget')}, "
                     f"{rows[0].get('run', {}).get('label_by', 'gold')}); use a new --out")
  done = {r["id"] for r in rows}
  emb = dict(np.load(emb_path)) if os.path.exists(emb_path) else {}
  todo = [e for e in examples if e.id not in done]
  print(f"{len(examples)} questions, {len(done)} already labelled, {len(todo)} to go; "
        f"scorers {scorers}; {len(grid.settings())} settings each", file=sys.stderr)
  n_max = max(len(e.passages) for e in examples) if examples else 0
  run = {"data": os.path.basename(args.data), "budget": args.budget, "encoder": args.encoder,
         "grid": {"iterations": grid.iterations, "cost_penalty": grid.cost_penalty,
                  "exploration": grid.exploration}, "margin": args.margin, "label_by": args.label_by}
  if quality_fn is not None:
    run["generator"] = {"name": quality_fn.generator.name, "max_new_tokens": args.max_new_tokens}
  cached = qa.FeatureCache(args.features, encoder=args.encoder, n_max=n_max) if args.features else None
  if todo and (cached is None or cached.get(todo) is None) and encoder is None:
    encoder = jaxsel.load_encoder(args.encoder)
  if cached is not None and todo:
    cached.ensure(encoder, todo)
  t0 = time.time()
  for s in range(0, len(todo), args.chunk):
    batch = todo[s:s + args.chunk]
    feats = cached.get(batch) if cached is not None else None
    if feats is None:
      feats = qa.featurize(encoder, batch, n_max=n_max)
    tokens = {}
    if "embedding" in model_scorers:
      tokens["embedding"] = qa.tokenize(encoder.tokenizer, batch, n_max=n_max)
    if "cross_encoder" in model_scorers:
      tokens["cross_encoder"] = qa.tokenize(ce.tokenizer, batch, n_max=n_max)
    table = labels.sweep_batch(batch, feats, scorers=scorers, budget=args.budget, grid=grid,
                          max_depth=args.max_depth, builders=builders, tokens=tokens,
                          progress=not args.no_progress, quality_fn=quality_fn)
    for e, qual, q in zip(batch, table, feats.query):
      emb[e.id] = q
      rows.append({"id": e.id, "question": e.question, "scorers": scorers,
                   "settings": [list(x) for x in grid.settings()], "quality": qual.round(6).tolist(),
                   "embedding": {"file": os.path.basename(emb_path), "key": e.id}, "run": run})
    rows = labels.finalize_labels(rows, margin=args.margin, tie_tolerance=args.tie_tolerance)
    # Embeddings first: a label row never references a missing embedding.
    atomic_savez(emb_path, **emb)
    labels.write_labels(args.out, rows)
    print(f"labelled {min(s + args.chunk, len(todo))}/{len(todo)} ({time.time() - t0:.0f}s)", file=sys.stderr)
  if rows:  # re-finalise (e.g. with another --tie-tolerance) without sweeping again
    rows = labels.finalize_labels(rows, margin=args.margin, tie_tolerance=args.tie_tolerance)
    labels.write_labels(args.out, rows)
  kept = sum(r["keep"] for r in rows)
  counts = {}
  for r in rows:
    if r["keep"]:
      counts[r["scorer"]] = counts.get(r["scorer"], 0) + 1
  print(json.dumps({"labelled": len(rows), "kept": kept, "best_scorer_counts": counts}))
  return 0


if __name__ == "__main__":
  sys.exit(main())

"""Train the configuration agent on labelled questions (see `label_queries.py`).

Reads the labels JSONL and the query embeddings it references, keeps the questions whose
best scorer clearly wins (`keep`, unless `--all`), splits them into train/validation
(seeded), trains with Adam on the combined loss (`jaxsel.contrib.train_agent`) with an
orbax checkpoint every epoch, and writes the final metrics as JSON and the agent as a folder
that `jaxsel.load_agent` loads.

    python -m training train-agent --labels out/labels/labels.jsonl --out out/agent
    python -m training train-agent ... --resume     # continue from the last checkpoint
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import jaxsel  # noqa: E402
from training.files import atomic_write  # noqa: E402
from training.labels import read_labels  # noqa: E402



def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--labels", default=os.path.join(ROOT, "out", "labels", "labels.jsonl"))
  p.add_argument("--out", default=os.path.join(ROOT, "out", "agent"), help="folder for the trained agent")
  p.add_argument("--checkpoints", default=None, help="checkpoint folder (default OUT/checkpoints)")
  p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
  p.add_argument("--epochs", type=int, default=60)
  p.add_argument("--batch-size", type=int, default=32)
  p.add_argument("--lr", type=float, default=1e-3)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--alpha", type=float, default=1.0, help="contrastive loss weight")
  p.add_argument("--beta", type=float, default=1.0, help="classification loss weight")
  p.add_argument("--gamma", type=float, default=1.0, help="regression loss weight")
  p.add_argument("--margin", type=float, default=1.0, help="contrastive margin")
  p.add_argument("--val-fraction", type=float, default=0.2)
  p.add_argument("--select", choices=("best_val", "last"), default="best_val",
                 help="save the epoch of best validation scorer accuracy (default) or the last one")
  p.add_argument("--hidden", default="512,256,128", help="tower widths")
  p.add_argument("--scorers", default=None,
                 help="scorer names of the classification head (default: those in the labels)")
  p.add_argument("--all", action="store_true", help="train on every label, not only `keep` ones")
  p.add_argument("--metrics", default=None, help="metrics JSON path (default OUT/metrics.json)")
  p.add_argument("--no-progress", action="store_true")
  return p.parse_args(argv)


def load_labelled(path: str, *, use_all: bool = False):
  """`(rows, embeddings [N, D])` of the usable label rows."""
  rows = read_labels(path)
  if not rows:
    raise SystemExit(f"no labels in {path}; run training/label_queries.py first")
  rows = [r for r in rows if use_all or r["keep"]]
  if not rows:
    raise SystemExit(f"no label in {path} passes the margin filter; lower --margin when labelling or pass --all")
  cache: dict = {}
  emb = []
  base = os.path.dirname(os.path.abspath(path))
  for r in rows:
    ref = r["embedding"]
    f = os.path.join(base, ref["file"])
    if f not in cache:
      if not os.path.exists(f):
        raise SystemExit(f"{path} references {f}, which does not exist")
      cache[f] = np.load(f)
    if ref["key"] not in cache[f]:
      raise SystemExit(f"{f} has no embedding for question {ref['key']!r}")
    emb.append(cache[f][ref["key"]])
  return rows, np.stack(emb).astype(np.float32)


def main(argv=None) -> int:
  args = parse_args(argv)

  rows, emb = load_labelled(args.labels, use_all=args.all)
  if args.scorers:
    scorers = tuple(s for s in args.scorers.split(",") if s)
  else:  # every scorer that was swept, in sweep order, so the head covers all choices
    scorers = tuple(rows[0]["scores"].keys())
  settings = [[r["iterations"], r["cost_penalty"], r["exploration"]] for r in rows]
  grid = rows[0].get("run", {}).get("grid", {})
  cfg_kw = {}
  if grid:  # the regression head predicts inside the swept ranges
    cfg_kw = {"iterations_range": (min(grid["iterations"]), max(grid["iterations"])),
              "cost_penalty_range": (0.0, max(grid["cost_penalty"])),
              "exploration_range": (0.0, max(grid["exploration"])),
              "iterations_choices": tuple(grid["iterations"])}
  config = jaxsel.contrib.AgentConfig(in_dim=emb.shape[1], scorers=scorers,
                       hidden=tuple(int(h) for h in args.hidden.split(",")), **cfg_kw)
  data = jaxsel.contrib.make_dataset(config, emb, [r["scorer"] for r in rows], settings)
  train, val = jaxsel.contrib.split_dataset(data, validation_fraction=args.val_fraction, seed=args.seed)
  tc = jaxsel.contrib.TrainConfig(batch_size=args.batch_size, epochs=args.epochs, learning_rate=args.lr,
                   seed=args.seed, alpha=args.alpha, beta=args.beta, gamma=args.gamma,
                   margin=args.margin, select=args.select if args.val_fraction > 0 else "last")
  ck = args.checkpoints or os.path.join(args.out, "checkpoints")
  print(f"{len(train)} train / {len(val)} validation questions; scorers {scorers}", file=sys.stderr)
  res = jaxsel.contrib.train_agent(config, train, config=tc, validation=val, checkpoint_dir=ck, resume=args.resume,
                    progress=not args.no_progress)
  counts = {s: int((data.scorer == i).sum()) for i, s in enumerate(scorers)}
  majority = max(counts.values()) / max(len(data), 1)
  metrics = {**res.metrics, "train_examples": len(train), "label_counts": counts,
             "majority_baseline_accuracy": majority, "epochs": args.epochs,
             "history": res.history}
  jaxsel.contrib.save_agent(res.agent, args.out, metadata={"labels": os.path.abspath(args.labels), "metrics": metrics})
  mpath = args.metrics or os.path.join(args.out, "metrics.json")
  atomic_write(mpath, json.dumps(metrics, indent=2).encode("utf-8"))
  print(json.dumps(metrics, indent=2))
  return 0


if __name__ == "__main__":
  sys.exit(main())

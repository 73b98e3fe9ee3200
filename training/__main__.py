"""One command for the research code: `python -m training COMMAND [options]`.

    python -m training defaults            # what users get without choosing a method
    python -m training evaluate ...        # the tables, cross-dataset runs, the agent
    python -m training forms ...           # candidate forms (titled, untitled, split)
    python -m training answers ...         # answers a generator gives from each context
    python -m training granularity ...     # whole paragraphs or their sentences, one budget
    python -m training agent-menu ...      # the agent over granularity, scorer and iterations
    python -m training wide ...            # CORAG among 10-1,000 documents (the search's width)
    python -m training latency ...         # select latency with cached embeddings
    python -m training features ...        # embed and cache whole-paragraph features
    python -m training label ...           # label questions for the configuration agent
    python -m training train-agent ...     # train the configuration agent
    python -m training train-hops ...      # train the learned second-hop scorer

`python -m training COMMAND --help` shows each command's options. Every command is one module
of this folder (its `main(argv)`) or, for the quality evaluations (defaults, forms, granularity,
agent-menu), one grid of the runner (`training/grids.py`: sets x forms x budgets x
configurations -> stored runs -> one report); run from the repository root.
"""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "defaults": "grids:defaults",
    "evaluate": "evaluate",
    "forms": "grids:forms",
    "answers": "evaluate_answers",
    "granularity": "grids:granularity",
    "agent-menu": "grids:agent_menu_command",
    "wide": "wide_eval",
    "latency": "hop_latency",
    "features": "hop_features",
    "label": "label_queries",
    "train-agent": "train_agent",
    "train-hops": "train_hops",
}


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
    print(__doc__.strip())
    if argv and argv[0] not in ("-h", "--help"):
      print(f"\nunknown command {argv[0]!r}; use one of {', '.join(COMMANDS)}", file=sys.stderr)
      return 2
    return 0
  module, _, function = COMMANDS[argv[0]].partition(":")
  run = getattr(importlib.import_module(f"training.{module}"), function or "main")
  return int(run(argv[1:]) or 0)


if __name__ == "__main__":
  sys.exit(main())

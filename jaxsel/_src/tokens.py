"""Token counts in the reader's unit: one `TokenCounter` over any tokenizer.

The budget is the reader's: what a context costs is what the model that reads it counts. A
`TokenCounter` counts texts in one such unit and is built by `token_counter` from

* a Hugging Face tokenizer (fast, or slow: counts only), or anything with a `.tokenizer`
  attribute holding one (a jaxsel encoder, a `TransformersGenerator`);
* a tiktoken `Encoding` (the optional package `tiktoken`; `pip install "jaxsel[tiktoken]"`);
* a name: a tiktoken encoding (``"o200k_base"``, ``"cl100k_base"``, or ``"tiktoken:gpt-4o"``
  for a model's encoding), a local tokenizer folder, a ``.gguf`` file, or a hub id already in the
  local cache (`AutoTokenizer.from_pretrained(..., local_files_only=True)`: nothing is downloaded);
* a callable `texts -> counts` (a list of strings in, one int each out); a function of one
  text returning its count or its tokens (LlamaIndex's `Settings.tokenizer`, tiktoken's
  `encode`) goes through `text_counter`; an object with only `encode(text)` is counted so;
* None: a rule needing no model (one token per word, number, symbol or CJK character).

Counts never fall below a text's real size in the reader's unit. A WordPiece tokenizer (BERT,
MiniLM) writes one `[UNK]` for a word it cannot split (longer than 100 characters, or with a
character outside its vocabulary): such a piece costs one token per character it covers, the
most pieces WordPiece could cut it into (every piece is at least one character), so a 5000-
character run of "a" costs 5000, not 1. A slow tokenizer gives no offsets: a text with an
[UNK] costs at least its number of characters. Counts are of the text alone: no special tokens
([CLS], BOS) and no chat template (generators count those themselves).

Counts are cached: a counter built from a tokenizer or by the rule keeps the counts of the
texts it has seen (least recently used dropped past `COUNT_CACHE_CHARS` characters of text), and
`token_counter` hands back the same counter for a tokenizer it saw recently, so the same
passages, counted again by the next request, cost a dictionary look-up. A callable is never
cached (it may count differently from call to call).

Shape legend: N texts.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
import re
import threading
from typing import Callable, Optional, Sequence

import numpy as np

from jaxsel._src import checks

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f"
# The rule when no tokenizer is given: a CJK character, a word, or a symbol is one token.
RULE_TOKEN = re.compile(rf"[{CJK}]|[^\W{CJK}]+|[^\w\s]")
TIKTOKEN_PREFIX = "tiktoken:"
# Characters of text whose counts a counter keeps (~8 M: the texts of thousands of requests,
# some tens of MB with the dictionary's own cost).
COUNT_CACHE_CHARS = 1 << 23


class _CountCache:
  """Token counts of texts already counted, least recently used dropped once the texts held
  exceed `max_chars` characters. Safe to share between threads (the server counts from many)."""

  def __init__(self, max_chars: int):
    self.max_chars = max_chars
    self._counts = collections.OrderedDict()
    self._chars = 0
    self._lock = threading.Lock()

  def count(self, texts: list, count_new: Callable[[list], np.ndarray]) -> np.ndarray:
    """`[N]` counts of `texts`: known ones looked up, the others counted by `count_new`
    (each distinct text once) and kept."""
    out = np.empty(len(texts), np.int64)
    missing = {}
    with self._lock:
      for i, t in enumerate(texts):
        c = self._counts.get(t)
        if c is None:
          missing.setdefault(t, []).append(i)
        else:
          self._counts.move_to_end(t)
          out[i] = c
    if not missing:
      return out
    new = list(missing)
    counts = count_new(new)
    with self._lock:
      for t, c in zip(new, counts):
        out[missing[t]] = c
        if len(t) <= self.max_chars and t not in self._counts:
          self._counts[t] = int(c)
          self._chars += len(t)
      while self._chars > self.max_chars:
        t, _ = self._counts.popitem(last=False)
        self._chars -= len(t)
    return out

  def clear(self) -> None:
    with self._lock:
      self._counts.clear()
      self._chars = 0


@dataclasses.dataclass(frozen=True)
class TokenCounter:
  """Counts texts in one reader's unit.

  Attributes:
    name: what counts (for messages and `SelectionResult.unit`-like labels).
    count_fn: `texts -> [N]` token counts (ints >= 0).
    spans_fn: `texts -> [[(start, end), ...] per text]`, the character span of every counted
      token (as many spans as the count), or None when the tokenizer gives no offsets (a
      callable): splitting then cuts by counting.
    words_fn: `text -> [(start, end), ...]`, the tokenizer's words (its pre-tokenisation),
      or None: the rule's words (a word, a number, a symbol or a CJK character).
    tokenizer: the tokenizer object behind it (None for the rule and callables).
    cache_chars: characters of text whose counts are kept (0: none; see the module docstring).
  """
  name: str
  count_fn: Callable[[list], Sequence[int]]
  spans_fn: Optional[Callable[[list], list]] = None
  words_fn: Optional[Callable[[str], list]] = None
  tokenizer: object = None
  cache_chars: int = 0
  _cache: Optional[_CountCache] = dataclasses.field(init=False, repr=False, compare=False,
                                                    default=None)

  def __post_init__(self):
    if self.cache_chars:
      object.__setattr__(self, "_cache", _CountCache(self.cache_chars))

  def count(self, texts: Sequence[str]) -> np.ndarray:
    """`[N]` int64 token counts of `texts` (each checked to be a str of valid Unicode)."""
    texts = checks.check_texts(texts, "texts")
    if not texts:
      return np.zeros((0,), np.int64)
    if self._cache is None:
      return self._count_new(list(texts))
    return self._cache.count(list(texts), self._count_new)

  def _count_new(self, texts: list) -> np.ndarray:
    return _check_counts(self.count_fn(texts), len(texts), self.name)

  def clear_cache(self) -> None:
    """Forgets the counts kept (after changing the tokenizer in place, e.g. `add_tokens`)."""
    if self._cache is not None:
      self._cache.clear()

  def count_one(self, text: str) -> int:
    return int(self.count([text])[0])

  @property
  def has_spans(self) -> bool:
    return self.spans_fn is not None

  def spans(self, texts: Sequence[str]) -> list:
    """Token spans of each text (see `spans_fn`); a TypeError for a counter without them."""
    if self.spans_fn is None:
      raise TypeError(f"the tokenizer {self.name} gives no token offsets.")
    return self.spans_fn(list(texts)) if texts else []

  def truncate(self, text: str, max_tokens: int) -> str:
    """`text` cut to its first `max_tokens` tokens (unchanged when it has no more): at the
    end of its `max_tokens`-th token where the tokenizer gives offsets, else the longest
    prefix it counts at most `max_tokens` (binary search over characters)."""
    checks.integer(max_tokens, "max_tokens", low=0)
    if self.count_one(text) <= max_tokens:
      return text
    if self.has_spans:
      return text[:self.spans([text])[0][max_tokens - 1][1]] if max_tokens else ""
    lo, hi = 0, len(text)
    while lo < hi:
      mid = (lo + hi + 1) // 2
      lo, hi = (mid, hi) if self.count_one(text[:mid]) <= max_tokens else (lo, mid - 1)
    return text[:lo]

  def words(self, text: str) -> list:
    """`[(start, end), ...]` of the tokenizer's words in `text` (its pre-tokenisation; every
    CJK character is a word for BERT-family tokenizers), without surrounding whitespace."""
    if self.words_fn is None:
      return [m.span() for m in RULE_TOKEN.finditer(text)]
    return self.words_fn(text)


MAX_COUNT = 2**31 - 1  # a count above this is not a count of tokens (and overflows int64 later)


def _check_counts(counts, n: int, name: str) -> np.ndarray:
  try:
    out = np.asarray(counts)
  except (TypeError, ValueError):
    out = np.asarray([], object)
  if out.shape != (n,) or not (np.issubdtype(out.dtype, np.integer) or out.dtype == object):
    raise TypeError(f"the token counter {name} must return one int per text ({n} texts), got "
                    f"{type(counts).__name__} {np.shape(counts) if out.dtype != object else ''}; "
                    "a function of one text goes in as `lambda texts: [count(t) for t in texts]`.")
  if out.dtype == object:
    if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in out):
      raise TypeError(f"the token counter {name} must return ints, got {list(out)[:3]}...")
  if n and out.min() < 0:
    raise ValueError(f"the token counter {name} returned a negative count ({int(out.min())}).")
  if n and out.max() > MAX_COUNT:
    raise ValueError(f"the token counter {name} returned {int(out.max()):,} tokens for one text, "
                     f"more than any text holds (at most {MAX_COUNT:,} are counted); check that "
                     "it returns a count of tokens per text.")
  return out.astype(np.int64)


# ----------------------------------------------------------------------------- the rule


def _rule_counter() -> TokenCounter:
  return TokenCounter(
      name="rule (a word, number, symbol or CJK character each one token)",
      count_fn=lambda texts: [len(RULE_TOKEN.findall(t)) for t in texts],
      spans_fn=lambda texts: [[m.span() for m in RULE_TOKEN.finditer(t)] for t in texts],
      cache_chars=COUNT_CACHE_CHARS)


# ----------------------------------------------------------------------------- Hugging Face


def is_hf_tokenizer(tok) -> bool:
  """Whether `tok` is a Hugging Face tokenizer (told by what it has: importing `transformers`
  to ask `isinstance` would cost every caller a second)."""
  return callable(tok) and all(callable(getattr(tok, m, None))
                               for m in ("convert_ids_to_tokens", "batch_decode"))


def _hf_name(tok) -> str:
  return repr(getattr(tok, "name_or_path", "") or type(tok).__name__)


def _slow_counter(tok) -> TokenCounter:
  """Counts with a slow (Python) tokenizer, which gives no offsets: a text holding an [UNK]
  costs at least its number of characters (every piece covers at least one character)."""
  unk = tok.unk_token_id

  def count(texts):
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    return [max(len(i), len(t)) if unk is not None and unk in i else len(i)
            for t, i in zip(texts, ids)]

  return TokenCounter(name=f"Hugging Face tokenizer {_hf_name(tok)} (slow)", count_fn=count,
                      tokenizer=tok, cache_chars=COUNT_CACHE_CHARS)


def _hf_counter(tok) -> TokenCounter:
  """Counts with a Hugging Face tokenizer; an [UNK] costs one token per character it covers."""
  if not getattr(tok, "is_fast", False):
    return _slow_counter(tok)
  unk = tok.unk_token_id

  def encode(texts):
    return tok(texts, add_special_tokens=False, return_offsets_mapping=True)

  def count(texts):
    out = encode(texts)
    counts = []
    for ids, offsets in zip(out["input_ids"], out["offset_mapping"]):
      n = len(ids)
      if unk is not None and unk in ids:
        n += sum(max(e - s, 1) - 1 for i, (s, e) in zip(ids, offsets) if i == unk)
      counts.append(n)
    return counts

  def spans(texts):
    out = encode(texts)
    result = []
    for ids, offsets in zip(out["input_ids"], out["offset_mapping"]):
      row = []
      for i, (s, e) in zip(ids, offsets):
        if i == unk and e - s > 1:  # one span per character: as many spans as the count
          row += [(c, c + 1) for c in range(s, e)]
        else:
          row.append((s, e))
      result.append(row)
    return result

  def words(text):
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    found = {}
    for w, (s, e) in zip(enc.word_ids(), enc["offset_mapping"]):
      if w is None or e <= s:
        continue
      a, b = found.get(w, (s, e))
      found[w] = (min(a, s), max(b, e))
    stripped = (_strip(text, a, b) for a, b in sorted(found.values()))
    return [(a, b) for a, b in stripped if b > a]

  backend = getattr(tok, "backend_tokenizer", None)
  has_words = backend is not None and backend.pre_tokenizer is not None
  return TokenCounter(name=f"Hugging Face tokenizer {_hf_name(tok)}", count_fn=count,
                      spans_fn=spans, words_fn=words if has_words else None, tokenizer=tok,
                      cache_chars=COUNT_CACHE_CHARS)


def _strip(text: str, a: int, b: int) -> tuple:
  while a < b and text[a].isspace():
    a += 1
  while b > a and text[b - 1].isspace():
    b -= 1
  return a, b


# ----------------------------------------------------------------------------- tiktoken


def _is_tiktoken(tok) -> bool:
  return all(callable(getattr(tok, m, None))
             for m in ("encode_ordinary_batch", "decode_with_offsets"))


def _tiktoken_counter(enc) -> TokenCounter:
  """Counts with a tiktoken `Encoding` (special-token text counted as ordinary text, as an API
  sends a user's text)."""

  def spans(texts):
    out = []
    for t, ids in zip(texts, enc.encode_ordinary_batch(texts)):
      _, starts = enc.decode_with_offsets(ids)
      ends = starts[1:] + [len(t)]
      out.append(list(zip(starts, ends)))
    return out

  return TokenCounter(name=f"tiktoken encoding {getattr(enc, 'name', '?')!r}",
                      count_fn=lambda texts: [len(i) for i in enc.encode_ordinary_batch(texts)],
                      spans_fn=spans, tokenizer=enc, cache_chars=COUNT_CACHE_CHARS)


def _load_tiktoken(name: str):
  try:
    import tiktoken  # optional: only for tiktoken encodings
  except ImportError:
    raise ModuleNotFoundError(
        f"the tokenizer {name!r} is a tiktoken encoding; install it with "
        'python -m pip install "jaxsel[tiktoken]".') from None
  bare = name[len(TIKTOKEN_PREFIX):] if name.startswith(TIKTOKEN_PREFIX) else name
  try:
    if bare in tiktoken.list_encoding_names():
      return tiktoken.get_encoding(bare)
    return tiktoken.encoding_for_model(bare)
  except KeyError:
    raise ValueError(f"{name!r} is neither a tiktoken encoding ("
                     f"{', '.join(tiktoken.list_encoding_names())}) nor a model tiktoken "
                     "knows.") from None
  except Exception as e:  # noqa: BLE001 - tiktoken fetches its files over HTTP the first time
    raise OSError(f"could not load the tiktoken encoding {name!r} ({e}); tiktoken downloads it "
                  "once into TIKTOKEN_CACHE_DIR: without network, copy that cache over.") from e


def _tiktoken_names() -> tuple:
  try:
    import tiktoken  # optional
  except ImportError:
    return ("gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base")
  return tuple(tiktoken.list_encoding_names())


# ----------------------------------------------------------------------------- by name


def load_tokenizer(name_or_path):
  """A tokenizer by name: a tiktoken encoding, a ``.gguf`` file, a local folder, or a hub id
  in the local cache. Nothing is downloaded from the hub."""
  where = os.fspath(name_or_path)
  if where.startswith(TIKTOKEN_PREFIX) or where in _tiktoken_names():
    return _load_tiktoken(where)
  path = pathlib.Path(where).expanduser()
  settings = {}
  if where.endswith(".gguf"):
    if not path.is_file():
      raise FileNotFoundError(f"the tokenizer file {where!r} does not exist.")
    where, settings = str(path.parent), {"gguf_file": path.name}
  elif path.exists():
    where = str(path)
  elif os.path.isabs(where) or where.startswith((".", "~")) or where.count("/") > 1:
    raise FileNotFoundError(f"the tokenizer folder {where!r} does not exist.")
  import transformers  # a second to import: only tokenizers loaded by name need it here
  try:
    return transformers.AutoTokenizer.from_pretrained(where, local_files_only=True, **settings)
  except (OSError, ValueError) as e:
    raise OSError(
        f"could not load the tokenizer {os.fspath(name_or_path)!r}: give a tokenizer folder, a "
        ".gguf file, a hub id already in the local cache (nothing is downloaded), or a tiktoken "
        f"encoding ({', '.join(_tiktoken_names())}). ({' '.join(str(e).split())[:300]})") from e


# ----------------------------------------------------------------------------- one text at a time


def text_counter(fn: Callable) -> TokenCounter:
  """A `TokenCounter` from `fn(text)` returning the text's token count (an int) or its tokens
  (a sequence: its length counts), e.g. LlamaIndex's `Settings.tokenizer` or tiktoken's
  `Encoding.encode`."""
  if not callable(fn):
    raise TypeError(f"a per-text tokenizer must be callable, got {type(fn).__name__}.")

  def count(texts):
    out = []
    for i, t in enumerate(texts):
      n = fn(t)
      if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        try:
          n = len(n)
        except TypeError:
          raise TypeError(f"the tokenizer returned {type(n).__name__} for text {i}; it must "
                          "return a token count (int) or a sequence of tokens.") from None
      out.append(int(n))
    return out

  return TokenCounter(name=f"per-text {getattr(fn, '__qualname__', type(fn).__name__)}",
                      count_fn=count)


# ----------------------------------------------------------------------------- the entry point


_RULE = _rule_counter()
_RECENT = collections.OrderedDict()  # id(tokenizer) -> (tokenizer, size, counter), newest last
_RECENT_MAX = 8
_RECENT_LOCK = threading.Lock()


def _recent_counter(tok, build: Callable) -> TokenCounter:
  """`build(tok)`, or the counter built for `tok` among the last `_RECENT_MAX` tokenizers (the
  tokenizer is held, so its id is not reused; one that grew (`add_tokens`) gets a new counter)."""
  size = len(tok) if callable(getattr(tok, "__len__", None)) else getattr(tok, "n_vocab", None)
  with _RECENT_LOCK:
    hit = _RECENT.get(id(tok))
    if hit is not None and hit[0] is tok and hit[1] == size:
      _RECENT.move_to_end(id(tok))
      return hit[2]
  counter = build(tok)
  with _RECENT_LOCK:
    _RECENT[id(tok)] = (tok, size, counter)
    while len(_RECENT) > _RECENT_MAX:
      _RECENT.popitem(last=False)
  return counter


def token_counter(tokenizer=None, *, per_text: bool = False) -> TokenCounter:
  """The `TokenCounter` of `tokenizer` (see the module docstring for what it may be).
  `per_text`: a callable that is not a tokenizer is a function of one text returning its count
  or its tokens (e.g. LlamaIndex's `Settings.tokenizer`), not of a list of texts."""
  if isinstance(tokenizer, TokenCounter):
    return tokenizer
  if tokenizer is None:
    return _RULE
  if isinstance(tokenizer, (str, os.PathLike)):
    tokenizer = load_tokenizer(tokenizer)
  if is_hf_tokenizer(tokenizer):
    return _recent_counter(tokenizer, _hf_counter)
  if _is_tiktoken(tokenizer):
    return _recent_counter(tokenizer, _tiktoken_counter)
  inner = getattr(tokenizer, "tokenizer", None)
  if inner is not None and inner is not tokenizer:
    return token_counter(inner)
  if getattr(tokenizer, "counter", None) is not None:
    return token_counter(tokenizer.counter)
  if callable(tokenizer) and per_text:
    return text_counter(tokenizer)
  if callable(tokenizer):
    return TokenCounter(name=f"callable {getattr(tokenizer, '__name__', type(tokenizer).__name__)}",
                        count_fn=tokenizer)
  if callable(getattr(tokenizer, "encode", None)):  # e.g. a SentencePiece processor
    return text_counter(tokenizer.encode)
  raise TypeError(
      "`tokenizer` must be a Hugging Face tokenizer (or an object with `.tokenizer`, e.g. an "
      "encoder), a tiktoken Encoding, a name or path (tokenizer folder, .gguf file, tiktoken "
      "encoding), a callable `texts -> counts`, an object with `encode(text) -> tokens`, or "
      f"None; got {type(tokenizer).__name__}.")

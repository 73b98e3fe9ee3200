"""Model scorers: an encoder's embedding of the concatenated ordered chunks, or a
cross-encoder's logit over the query and the chunks, with token sequences assembled inside jit.

Shape legend: N candidate chunks, T positions in an order, Lc tokens per chunk, Lq query
tokens, L assembled sequence length, D embedding dimension.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxsel._src import checks, pytree
from jaxsel._src.scorers.base import Composable, safe_order

Array = jax.Array


def assemble_tokens(order: Array, chunk_ids: Array, chunk_lens: Array, *, prefix_ids: Array,
                    prefix_len: Array, max_len: int, sep_id: int, pad_id: int,
                    chunk_type: int = 0):
  """Concatenates the chunks of `order` after a prefix into one `[max_len]` sequence, in jit.

  Layout: `prefix[:prefix_len]  chunk_{o_0}[:len]  chunk_{o_1}[:len] …  [SEP]  [PAD]…`.
  Truncation: the prefix is kept whole (it must fit in `max_len - 1`); chunk tokens are
  appended in order and cut at `max_len - 1`, so later chunks lose their tail first (like
  Hugging Face's `truncation="only_second"`); the closing `[SEP]` is always present.

  Args:
    order: int32 `[T]`, `-1` padded.
    chunk_ids: int32 `[N, Lc]` token ids of each chunk without special tokens, padded.
    chunk_lens: int32 `[N]` number of real tokens of each chunk (clipped to `Lc`).
    prefix_ids: int32 `[P]`; `prefix_len` `[]` its real length.
  Returns:
    `(input_ids [L], attention_mask [L], token_type_ids [L])`, int32; chunk tokens and the
    closing `[SEP]` get token type `chunk_type`, the prefix 0.
  """
  used, idx = safe_order(order)
  d = order.shape[-1]
  lc = chunk_ids.shape[-1]
  lens = jnp.where(used, jnp.clip(chunk_lens[idx], 0, lc), 0).astype(jnp.int32)  # [T]
  ends = prefix_len + jnp.cumsum(lens)
  starts = ends - lens
  body = jnp.minimum(ends[-1] if d else prefix_len, max_len - 1)  # position of the closing [SEP]
  pos = jnp.arange(max_len, dtype=jnp.int32)
  if d:
    seg = jnp.minimum(jnp.searchsorted(ends, pos, side="right"), d - 1)  # zero-length segments skipped
    within = jnp.clip(pos - starts[seg], 0, lc - 1)
    tok = chunk_ids[idx[seg], within]
  else:
    tok = jnp.full((max_len,), pad_id, jnp.int32)
  tok_prefix = prefix_ids[jnp.minimum(pos, prefix_ids.shape[-1] - 1)]
  ids = jnp.where(pos < prefix_len, tok_prefix, tok)
  ids = jnp.where(pos == body, sep_id, jnp.where(pos > body, pad_id, ids)).astype(jnp.int32)
  mask = (pos <= body).astype(jnp.int32)
  types = jnp.where((pos >= prefix_len) & (pos <= body), chunk_type, 0).astype(jnp.int32)
  return ids, mask, types


def _check_chunks(chunk_ids, chunk_lens):
  chunk_ids = jnp.asarray(chunk_ids)
  if not jnp.issubdtype(chunk_ids.dtype, jnp.integer) or chunk_ids.ndim < 2:
    raise TypeError(f"`chunk_ids` must be integer token ids [N, Lc], got {chunk_ids.dtype} {chunk_ids.shape}.")
  chunk_lens = jnp.asarray(chunk_lens)
  if not jnp.issubdtype(chunk_lens.dtype, jnp.integer) or chunk_lens.shape != chunk_ids.shape[:-1]:
    raise ValueError(f"`chunk_lens` must be integer [N] = {chunk_ids.shape[:-1]}, got "
                     f"{chunk_lens.dtype} {chunk_lens.shape}.")
  return chunk_ids.astype(jnp.int32), chunk_lens.astype(jnp.int32)


def _call_model(fn, params, ids, mask, types):
  args = (ids[None], mask[None], types[None])
  return fn(*args) if params is None else fn(params, *args)


@pytree.dataclass
class EmbeddingScorer(Composable):
  """Cosine between `query_embedding` and `encode_fn`'s embedding of `[CLS] chunks… [SEP]`."""
  query_embedding: Array  # [D]
  chunk_ids: Array  # [N, Lc] int32
  chunk_lens: Array  # [N] int32
  params: Any  # pytree passed first to `encode_fn`, or None
  encode_fn: Callable = pytree.field(static=True)
  cls_id: int = pytree.field(static=True)
  sep_id: int = pytree.field(static=True)
  pad_id: int = pytree.field(static=True)
  max_len: int = pytree.field(static=True)

  @property
  def num_candidates(self) -> int:
    return self.chunk_ids.shape[-2]

  def tokens(self, order: Array):
    """The assembled `(input_ids, attention_mask, token_type_ids)`, each `[max_len]`."""
    return assemble_tokens(order, self.chunk_ids, self.chunk_lens,
                           prefix_ids=jnp.asarray([self.cls_id], jnp.int32), prefix_len=1,
                           max_len=self.max_len, sep_id=self.sep_id, pad_id=self.pad_id)

  def __call__(self, order: Array) -> Array:
    emb = _call_model(self.encode_fn, self.params, *self.tokens(order))[0]
    q = self.query_embedding
    return jnp.dot(emb, q) / jnp.maximum(jnp.linalg.norm(emb) * jnp.linalg.norm(q), 1e-12)


def embedding_scorer(encode_fn: Callable, query_embedding, chunk_ids, chunk_lens, *, cls_id: int,
                     sep_id: int, pad_id: int = 0, max_len: int = 256, params=None) -> EmbeddingScorer:
  """Scores an order by `cos(query_embedding, encode_fn(tokens of the concatenated chunks))`.

  Args:
    encode_fn: `encode_fn(input_ids [B, L], attention_mask [B, L], token_type_ids [B, L]) ->
      [B, D]` (e.g. a jaxsel encoder's `apply_fn`), or `encode_fn(params, ...)` when `params`
      is given (keeps weights as jit arguments rather than constants; `nnx.split` a model).
      Must be hashable (functions and bound methods are); it is a static field.
    query_embedding: `[D]` (the query encoded with the same model, query prompt if any).
    chunk_ids: int32 `[N, Lc]` token ids of each chunk without `[CLS]`/`[SEP]`, padded.
    chunk_lens: int32 `[N]` real token counts.
    max_len: assembled length L (static); see `assemble_tokens` for truncation.
  """
  chunk_ids, chunk_lens = _check_chunks(chunk_ids, chunk_lens)
  q = checks.as_float_array(query_embedding, "query_embedding")
  checks.check_finite(q, "query_embedding")
  if not callable(encode_fn):
    raise TypeError(f"`encode_fn` must be callable, got {type(encode_fn).__name__}.")
  if not isinstance(max_len, int) or max_len < 2:
    raise ValueError(f"`max_len` must be an int ≥ 2 ([CLS] and [SEP]), got {max_len!r}.")
  return EmbeddingScorer(query_embedding=q, chunk_ids=chunk_ids, chunk_lens=chunk_lens,
                         params=params, encode_fn=encode_fn, cls_id=int(cls_id), sep_id=int(sep_id),
                         pad_id=int(pad_id), max_len=max_len)


@pytree.dataclass
class CrossEncoderScorer(Composable):
  """A cross-encoder's logit `label` for `[CLS] query [SEP] chunk_1 … chunk_m [SEP]` (BERT), or
  `<s> query </s></s> chunk_1 … chunk_m </s>` (RoBERTa / XLM-R: `pair_sep=2`, `chunk_type=0`)."""
  query_ids: Array  # [Lq] int32, without special tokens, padded
  query_len: Array  # [] int32
  chunk_ids: Array  # [N, Lc] int32
  chunk_lens: Array  # [N] int32
  params: Any
  logits_fn: Callable = pytree.field(static=True)
  cls_id: int = pytree.field(static=True)
  sep_id: int = pytree.field(static=True)
  pad_id: int = pytree.field(static=True)
  max_len: int = pytree.field(static=True)
  label: int = pytree.field(static=True)
  pair_sep: int = pytree.field(static=True, default=1)
  chunk_type: int = pytree.field(static=True, default=1)

  @property
  def num_candidates(self) -> int:
    return self.chunk_ids.shape[-2]

  def tokens(self, order: Array):
    """The assembled `(input_ids, attention_mask, token_type_ids)`, each `[max_len]`."""
    lq = self.query_ids.shape[-1]
    qlen = jnp.clip(self.query_len, 0, lq).astype(jnp.int32)
    p = jnp.arange(lq + 1 + self.pair_sep)
    prefix = jnp.where(p == 0, self.cls_id,
                       jnp.where(p <= qlen, self.query_ids[jnp.clip(p - 1, 0, lq - 1)], self.sep_id))
    return assemble_tokens(order, self.chunk_ids, self.chunk_lens, prefix_ids=prefix.astype(jnp.int32),
                           prefix_len=qlen + 1 + self.pair_sep, max_len=self.max_len,
                           sep_id=self.sep_id, pad_id=self.pad_id, chunk_type=self.chunk_type)

  def __call__(self, order: Array) -> Array:
    return _call_model(self.logits_fn, self.params, *self.tokens(order))[0, self.label]


def cross_encoder_scorer(logits_fn: Callable, query_ids, query_len, chunk_ids, chunk_lens, *,
                         cls_id: int, sep_id: int, pad_id: int = 0, max_len: int = 512,
                         label: int = 0, params=None, pair_sep: int = 1,
                         chunk_type: int = 1) -> CrossEncoderScorer:
  """Scores an order with a cross-encoder over the whole assembled sequence.

  The sequence is the model's pair format with the ordered chunks as the second text:
  `[CLS] query [SEP] chunks… [SEP]` with chunk token type 1 for BERT (the defaults), and
  `<s> query </s></s> chunks… </s>` without token types for RoBERTa / XLM-R
  (`pair_sep=2, chunk_type=0`). A loaded `jaxsel.load_cross_encoder` model gives the right
  settings as `**ce.pair_format`.

  Args:
    logits_fn: `logits_fn(input_ids [B, L], attention_mask [B, L], token_type_ids [B, L]) ->
      [B, num_labels]` (e.g. a jaxsel cross-encoder's `logits_fn`), or `logits_fn(params, ...)`
      when `params` is given. Static (must be hashable).
    query_ids: int32 `[Lq]` query token ids without special tokens; `query_len` `[]` how many
      are real. `Lq + 2 + pair_sep` must be at most `max_len` (the query is never truncated
      here: cut it when tokenising).
    chunk_ids, chunk_lens: as in `embedding_scorer`; chunks get token type `chunk_type`.
    label: which logit is the value (static).
    pair_sep: separator tokens between the query and the chunks (1 BERT, 2 RoBERTa/XLM-R).
    chunk_type: token type of the chunks and the closing separator (1 BERT, 0 for models
      without token types, whose embedding table has one row).
  """
  chunk_ids, chunk_lens = _check_chunks(chunk_ids, chunk_lens)
  query_ids = jnp.asarray(query_ids)
  if not jnp.issubdtype(query_ids.dtype, jnp.integer) or query_ids.ndim < 1:
    raise TypeError(f"`query_ids` must be integer token ids [Lq], got {query_ids.dtype} {query_ids.shape}.")
  if not callable(logits_fn):
    raise TypeError(f"`logits_fn` must be callable, got {type(logits_fn).__name__}.")
  if isinstance(pair_sep, bool) or pair_sep not in (1, 2):
    raise ValueError(f"`pair_sep` must be 1 (BERT: [SEP]) or 2 (RoBERTa / XLM-R: </s></s>), got {pair_sep!r}.")
  if isinstance(chunk_type, bool) or chunk_type not in (0, 1):
    raise ValueError(f"`chunk_type` must be 0 or 1, got {chunk_type!r}.")
  need = query_ids.shape[-1] + 2 + pair_sep
  if not isinstance(max_len, int) or max_len < need:
    raise ValueError(f"`max_len` must be an int ≥ Lq + {2 + pair_sep} = {need} "
                     f"([CLS] query [SEP]{'[SEP]' if pair_sep == 2 else ''} … [SEP]), got {max_len!r}.")
  return CrossEncoderScorer(query_ids=query_ids.astype(jnp.int32),
                            query_len=jnp.asarray(query_len, jnp.int32), chunk_ids=chunk_ids,
                            chunk_lens=chunk_lens, params=params, logits_fn=logits_fn,
                            cls_id=int(cls_id), sep_id=int(sep_id), pad_id=int(pad_id),
                            max_len=max_len, label=int(label), pair_sep=int(pair_sep),
                            chunk_type=int(chunk_type))

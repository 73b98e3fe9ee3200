"""Value functions of ordered chunk combinations, for `jaxsel.corag_search` and the baselines.

Shape legend: N candidate chunks, T positions in an order (the search's `max_depth`),
Lc tokens per chunk, Lq query tokens, L assembled sequence length, D embedding dimension.

A scorer is a pytree (a frozen dataclass, `jaxsel._pytree`) called as `scorer(order) -> value`, where
`order` is int32 `[T]`: chunk indices in reading order, `-1` after the last one (an all `-1`
order is the empty combination). Scorers are pure and jit-able; the search scores all
children of a node in one `jax.vmap(scorer)` call, and a batch of queries is a batch of
scorers (every array leaf with a leading `[B]` axis) under `jax.vmap`.

Scorers compose: `0.7 * a + 0.3 * b`, `a - b`, `weighted_sum([(0.7, a), (0.3, b)])` are
scorers too (their weights are array leaves, so they can differ per query under `vmap`).

Which scorer for what:
* `objective_scorer`: a jaxsel objective (facility location, coverage, saturated coverage)
  of the chunks' set, with an optional position discount so that order matters.
* `relevance_scorer` / `pairwise_scorer`: unary relevance with a position discount, plus
  pairwise terms `P[earlier, later]` (redundancy penalties, order effects).
* `link_scorer` (with `title_links`): prefix-conditioned bonus for a chunk whose title
  appears in an earlier chunk, the bridge that multi-hop questions need.
* `embedding_scorer`: cosine between the query embedding and the encoder's embedding of the
  concatenated chunks in that order (token sequence assembled inside jit).
* `cross_encoder_scorer`: a cross-encoder's logit for `[CLS] query [SEP] chunk_1 … chunk_m [SEP]`.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel import _checks, _pytree

Array = jax.Array


class Scorer:
  """Mixin of every scorer: arithmetic that builds `WeightedSum`s.

  Subclasses define `__call__(order [T] int32) -> []` and `num_candidates` (N, or None
  when the scorer does not index chunk arrays), and may define `append_gains`.
  """

  def append_gains(self, order: Array) -> Optional[Array]:
    """What appending each chunk adds: `[N]`, entry j = `self(order + [j]) − self(order)`
    (meaningless for a j already in `order`), or None when the scorer has no such shortcut.

    `order` `[T]` holds its chunks first, `-1` after the last one, and has room for one more.
    The search scores a node's N children with one call of this, O(T·N) for the pairwise and
    link scorers, instead of N full calls, O(N·T²); None makes it score every child in full.
    """
    return None

  def _terms(self):
    return [(jnp.asarray(1.0, jnp.float32), self)]

  def __add__(self, other):
    if not isinstance(other, Scorer):
      return NotImplemented
    return _combine(self._terms() + other._terms())

  def __sub__(self, other):
    if not isinstance(other, Scorer):
      return NotImplemented
    return self + (-1.0) * other

  def __mul__(self, w):
    if isinstance(w, Scorer):
      return NotImplemented
    return _combine([(jnp.asarray(w, jnp.float32) * v, s) for v, s in self._terms()])

  __rmul__ = __mul__

  def __neg__(self):
    return self * -1.0


@_pytree.dataclass
class WeightedSum(Scorer):
  """`Σ_i weights[i] · terms[i](order)`. Build with `weighted_sum` or scorer arithmetic."""
  weights: Array  # [S] (or [B, S] for a batch)
  terms: tuple  # S scorers

  @property
  def num_candidates(self) -> Optional[int]:
    ns = {t.num_candidates for t in self.terms} - {None}
    return ns.pop() if ns else None

  def _terms(self):
    return [(self.weights[..., i], t) for i, t in enumerate(self.terms)]

  def __call__(self, order: Array) -> Array:
    vals = jnp.stack([t(order) for t in self.terms], axis=-1)
    return jnp.sum(self.weights * vals, axis=-1)

  def append_gains(self, order: Array) -> Optional[Array]:
    gains = [t.append_gains(order) for t in self.terms]
    if any(g is None for g in gains):
      return None
    return jnp.sum(self.weights * jnp.stack(gains, axis=-1), axis=-1)


def _combine(terms) -> WeightedSum:
  ns = {s.num_candidates for _, s in terms} - {None}
  if len(ns) > 1:
    raise ValueError(f"Scorers of different candidate counts N cannot be combined: {sorted(ns)}.")
  return WeightedSum(weights=jnp.stack([jnp.asarray(w, jnp.float32) for w, _ in terms], axis=-1),
                     terms=tuple(s for _, s in terms))


def weighted_sum(terms: Sequence) -> WeightedSum:
  """A scorer that adds `weight · scorer(order)` over `terms`, a sequence of `(weight, scorer)`."""
  terms = list(terms)
  if not terms:
    raise ValueError("`terms` is empty; pass at least one `(weight, scorer)` pair.")
  flat = []
  for t in terms:
    if not (isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], Scorer)):
      raise TypeError(f"Each term must be a `(weight, scorer)` pair, got {t!r}.")
    w, s = t
    flat += [(jnp.asarray(w, jnp.float32) * v, x) for v, x in s._terms()]
  return _combine(flat)


# ----------------------------------------------------------------------------- helpers


def _safe(order: Array):
  """(`used` bool [T], `idx` int32 [T] with -1 replaced by 0) for gathers."""
  order = jnp.asarray(order, jnp.int32)
  used = order >= 0
  return used, jnp.where(used, order, 0)


def _discounts(discount, d: int, dtype=jnp.float32) -> Array:
  return jnp.asarray(discount, dtype) ** jnp.arange(d, dtype=dtype)


def _discount_at(discount, used: Array, dtype=jnp.float32) -> Array:
  """The weight `discount^t` of the position `t` after the chunks of `used` `[T]`."""
  return jnp.asarray(discount, dtype) ** jnp.sum(used).astype(dtype)


def _discount(discount) -> Array:
  """The checked position discount: in (0, 1] (NaN fails this test too)."""
  d = _checks.as_float_array(discount, "discount").astype(jnp.float32)
  if _checks.is_concrete(d) and not bool(((d > 0) & (d <= 1)).all()):
    raise ValueError(f"`discount` must lie in (0, 1] (weight discount^t of position t), got {discount}.")
  return d


def _check_n(n_expected, arr, name, axis=-1):
  if arr.shape[axis] != n_expected:
    raise ValueError(f"`{name}` must have N={n_expected} along axis {axis}, got shape {arr.shape}.")


# ----------------------------------------------------------------------------- objective


@_pytree.dataclass
class ObjectiveScorer(Scorer):
  """Discounted marginal gains of a jaxsel objective along the order:
  `Σ_t discount^t · (f(S_{≤t}) − f(S_{<t}))`; with `discount = 1` this is `f(S)` and the
  order does not matter; with `discount < 1` earlier chunks count more."""
  objective: Any  # a jaxsel objective (init / update / state_value)
  discount: Array  # []

  @property
  def num_candidates(self) -> int:
    return self.objective.num_candidates

  def __call__(self, order: Array) -> Array:
    used, idx = _safe(order)
    w = _discounts(self.discount, order.shape[-1])

    def step(carry, x):
      state, prev, total = carry
      j, u, wt = x
      new = self.objective.update(state, j)
      state = jax.tree.map(lambda a, b: jnp.where(u, a, b), new, state)
      val = self.objective.state_value(state)
      return (state, val, total + wt * (val - prev)), None

    s0 = self.objective.init()
    v0 = self.objective.state_value(s0)
    (_, _, total), _ = lax.scan(step, (s0, v0, jnp.zeros((), v0.dtype)), (idx, used, w))
    return total

  def append_gains(self, order: Array) -> Optional[Array]:
    if not hasattr(self.objective, "gains"):
      return None
    used, idx = _safe(order)

    def step(state, x):
      j, u = x
      return jax.tree.map(lambda a, b: jnp.where(u, a, b), self.objective.update(state, j), state), None

    state, _ = lax.scan(step, self.objective.init(), (idx, used))
    gains = self.objective.gains(state)
    return _discount_at(self.discount, used, gains.dtype) * gains


def objective_scorer(objective, *, discount: float = 1.0) -> ObjectiveScorer:
  """Scores an order by the objective's value of its set (see `ObjectiveScorer`).

  `discount` in (0, 1]: weight of the t-th chunk's marginal gain is `discount^t`.
  """
  if not all(hasattr(objective, a) for a in ("init", "update", "state_value", "num_candidates")):
    raise TypeError(f"`objective` must be a jaxsel objective (e.g. `jaxsel.facility_location`), "
                    f"got {type(objective).__name__}.")
  return ObjectiveScorer(objective=objective, discount=_discount(discount))


# ----------------------------------------------------------------------------- pairwise


@_pytree.dataclass
class PairwiseScorer(Scorer):
  """`Σ_t discount^t · unary[o_t] + Σ_{s<t} pairwise[o_s, o_t]`: unary relevance with a
  position discount plus a term for every ordered pair (earlier, later)."""
  unary: Array  # [N]
  pairwise: Optional[Array]  # [N, N] or None
  discount: Array  # []

  @property
  def num_candidates(self) -> int:
    return self.unary.shape[-1]

  def __call__(self, order: Array) -> Array:
    used, idx = _safe(order)
    d = order.shape[-1]
    w = _discounts(self.discount, d, self.unary.dtype)
    total = jnp.sum(jnp.where(used, w * self.unary[idx], 0))
    if self.pairwise is not None:
      p = self.pairwise[idx[:, None], idx[None, :]]  # [T, T]
      before = jnp.triu(jnp.ones((d, d), bool), k=1) & used[:, None] & used[None, :]
      total = total + jnp.sum(jnp.where(before, p, 0))
    return total

  def append_gains(self, order: Array) -> Array:
    used, idx = _safe(order)
    gains = _discount_at(self.discount, used, self.unary.dtype) * self.unary
    if self.pairwise is not None:
      gains = gains + jnp.sum(jnp.where(used[:, None], self.pairwise[idx], 0), axis=0)  # [T, N] rows
    return gains


def pairwise_scorer(pairwise=None, *, unary=None, discount: float = 1.0) -> PairwiseScorer:
  """`unary` `[N]` (default 0) with weights `discount^t` by position, plus `pairwise` `[N, N]`
  summed over ordered pairs `(earlier, later)`; an asymmetric `pairwise` makes order matter,
  a negative similarity matrix penalises redundancy."""
  if pairwise is None and unary is None:
    raise TypeError("Pass `pairwise` [N, N], `unary` [N], or both.")
  if pairwise is not None:
    pairwise = _checks.as_float_array(pairwise, "pairwise")
    if pairwise.ndim < 2 or pairwise.shape[-1] != pairwise.shape[-2]:
      raise ValueError(f"`pairwise` must be square [N, N], got shape {pairwise.shape}.")
    _checks.check_finite(pairwise, "pairwise")
  if unary is None:
    unary = jnp.zeros(pairwise.shape[:-1], pairwise.dtype)
  unary = _checks.as_float_array(unary, "unary")
  if unary.ndim < 1:
    raise ValueError(f"`unary` must be [N], got shape {unary.shape}.")
  _checks.check_finite(unary, "unary")
  if pairwise is not None:
    _check_n(unary.shape[-1], pairwise, "pairwise")
  return PairwiseScorer(unary=unary, pairwise=pairwise, discount=_discount(discount))


def relevance_scorer(relevance, *, discount: float = 1.0) -> PairwiseScorer:
  """Additive relevance `Σ_t discount^t · relevance[o_t]`, `relevance` `[N]` (e.g. query–chunk
  cosine). The search and `naive_rag` agree on it; add other scorers for interactions."""
  return pairwise_scorer(None, unary=relevance, discount=discount)


# ----------------------------------------------------------------------------- links


@_pytree.dataclass
class LinkScorer(Scorer):
  """Prefix-conditioned bonus: chunk `o_t` earns `max_{s<t} link[o_s, o_t] · source[o_s]`.

  With `link = title_links(texts, titles)`, a chunk earns the bonus when its title appears in a
  chunk read before it: the second hop of a multi-hop question, which need not resemble the
  query. `source` (default 1) weights the linking chunk, e.g. by its relevance, so that a
  chain of irrelevant chunks earns nothing.
  """
  link: Array  # [N, N] link[i, j]: chunk j is referenced by chunk i
  source: Array  # [N]

  @property
  def num_candidates(self) -> int:
    return self.link.shape[-1]

  def __call__(self, order: Array) -> Array:
    used, idx = _safe(order)
    d = order.shape[-1]
    p = self.link[idx[:, None], idx[None, :]] * self.source[idx][:, None]  # [T(s), T(t)]
    before = jnp.triu(jnp.ones((d, d), bool), k=1) & used[:, None] & used[None, :]
    bonus = jnp.max(jnp.where(before, p, 0), axis=0, initial=0)
    return jnp.sum(bonus)

  def append_gains(self, order: Array) -> Array:
    used, idx = _safe(order)
    p = self.link[idx] * self.source[idx][:, None]  # [T, N]: from each chunk read so far
    return jnp.max(jnp.where(used[:, None], p, 0), axis=0, initial=0)


def link_scorer(link, *, source=None) -> LinkScorer:
  """See `LinkScorer`. `link` `[N, N]` non-negative (1 = link), `source` `[N]` (default 1)."""
  link = _checks.as_float_array(link, "link")
  if link.ndim < 2 or link.shape[-1] != link.shape[-2]:
    raise ValueError(f"`link` must be square [N, N], got shape {link.shape}.")
  _checks.check_finite(link, "link")
  _checks.check_nonnegative(link, "link", "A link is 1 (or a weight ≥ 0) where chunk i names chunk j.")
  if source is None:
    source = jnp.ones(link.shape[:-1], link.dtype)
  source = _checks.as_float_array(source, "source")
  _check_n(link.shape[-1], source, "source")
  _checks.check_finite(source, "source")
  return LinkScorer(link=link, source=source)


def _normalise_title(title: str, strip_parenthetical: bool) -> str:
  if strip_parenthetical:
    title = re.sub(r"\s*\([^)]*\)\s*$", "", title)
  return " ".join(title.split())


def title_links(texts: Sequence[str], titles: Sequence[str], *, case_sensitive: bool = False,
                strip_parenthetical: bool = True, min_chars: int = 3) -> np.ndarray:
  """Link matrix `[N, N]` float32: `link[i, j] = 1` where chunk j's title occurs in chunk i's text.

  Plain Python, outside jit. The title must occur as whole words (`"Paris"` does not match
  `"Parisian"`); a trailing parenthetical disambiguator is dropped first (`"Ed Wood (film)"`
  matches `"Ed Wood"`) unless `strip_parenthetical=False`. Chunks of the same title (pieces of
  one document) never link to each other, nor does a chunk to itself; titles shorter than
  `min_chars` characters link to nothing. Any key phrase per chunk can stand in for `titles`.
  """
  texts, titles = list(texts), list(titles)
  if len(texts) != len(titles):
    raise ValueError(f"`texts` and `titles` must have the same length, got {len(texts)} and {len(titles)}.")
  n = len(texts)
  flags = 0 if case_sensitive else re.IGNORECASE
  norm = [_normalise_title(t, strip_parenthetical) for t in titles]
  link = np.zeros((n, n), np.float32)
  for j, t in enumerate(norm):
    if len(t) < min_chars:
      continue
    words = r"\s+".join(re.escape(w) for w in t.split())  # any whitespace between words
    pat = re.compile(r"(?<!\w)" + words + r"(?!\w)", flags)
    for i, text in enumerate(texts):
      if i != j and norm[i] != t and pat.search(text):
        link[i, j] = 1.0
  return link


# ----------------------------------------------------------------------------- token assembly


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
  used, idx = _safe(order)
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


@_pytree.dataclass
class EmbeddingScorer(Scorer):
  """Cosine between `query_embedding` and `encode_fn`'s embedding of `[CLS] chunks… [SEP]`."""
  query_embedding: Array  # [D]
  chunk_ids: Array  # [N, Lc] int32
  chunk_lens: Array  # [N] int32
  params: Any  # pytree passed first to `encode_fn`, or None
  encode_fn: Callable = _pytree.field(static=True)
  cls_id: int = _pytree.field(static=True)
  sep_id: int = _pytree.field(static=True)
  pad_id: int = _pytree.field(static=True)
  max_len: int = _pytree.field(static=True)

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
  q = _checks.as_float_array(query_embedding, "query_embedding")
  _checks.check_finite(q, "query_embedding")
  if not callable(encode_fn):
    raise TypeError(f"`encode_fn` must be callable, got {type(encode_fn).__name__}.")
  if not isinstance(max_len, int) or max_len < 2:
    raise ValueError(f"`max_len` must be an int ≥ 2 ([CLS] and [SEP]), got {max_len!r}.")
  return EmbeddingScorer(query_embedding=q, chunk_ids=chunk_ids, chunk_lens=chunk_lens,
                         params=params, encode_fn=encode_fn, cls_id=int(cls_id), sep_id=int(sep_id),
                         pad_id=int(pad_id), max_len=max_len)


@_pytree.dataclass
class CrossEncoderScorer(Scorer):
  """A cross-encoder's logit `label` for `[CLS] query [SEP] chunk_1 … chunk_m [SEP]` (BERT), or
  `<s> query </s></s> chunk_1 … chunk_m </s>` (RoBERTa / XLM-R: `pair_sep=2`, `chunk_type=0`)."""
  query_ids: Array  # [Lq] int32, without special tokens, padded
  query_len: Array  # [] int32
  chunk_ids: Array  # [N, Lc] int32
  chunk_lens: Array  # [N] int32
  params: Any
  logits_fn: Callable = _pytree.field(static=True)
  cls_id: int = _pytree.field(static=True)
  sep_id: int = _pytree.field(static=True)
  pad_id: int = _pytree.field(static=True)
  max_len: int = _pytree.field(static=True)
  label: int = _pytree.field(static=True)
  pair_sep: int = _pytree.field(static=True, default=1)
  chunk_type: int = _pytree.field(static=True, default=1)

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

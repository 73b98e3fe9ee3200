"""Self-attention over the rows of a batch in XLA, and the packing of real tokens.

Shape legend: B batch, L tokens, H hidden size, n heads, d = H / n, N rows (B * L positions,
or T packed real tokens).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array
ATTENTION_BATCH = 4  # sequences per step of the attention loop


class Packing(NamedTuple):
  """Where the real tokens of a padded `[B, L]` batch sit, for running the dense layers on
  those `T` tokens only (`T <= B * L`). The native attention kernel reads the packed rows
  directly; the XLA attention pads each sequence back to `L`."""
  rows: Array    # [T] int32: flat index (into B * L) of each packed row; extra rows repeat a pad
  unpack: Array  # [B * L] int32: the packed row of each position; T (out of range) on pads


def packing(attention_mask: Array, tokens: int) -> Packing:
  """The `Packing` of `attention_mask` `[B, L]` into `tokens` rows (static; at least the
  number of real tokens, which must fit: rows beyond them are pads and are dropped)."""
  valid = attention_mask.reshape(-1).astype(bool)
  first_pad = jnp.argmin(valid)  # only used as filler when some position is a pad
  (rows,) = jnp.nonzero(valid, size=tokens, fill_value=first_pad)
  rows = rows.astype(jnp.int32)
  t = jnp.arange(tokens, dtype=jnp.int32)
  unpack = jnp.full(valid.shape, tokens, jnp.int32).at[rows].set(jnp.where(valid[rows], t, tokens))
  return Packing(rows, unpack)


def to_padded(x: Array, pack: Packing | None, shape: tuple[int, int]) -> Array:
  """Rows `[N, C]` (packed or not) -> `[B, L, C]`, zero on pads when packed."""
  if pack is not None:
    x = jnp.take(x, pack.unpack, axis=0, mode="fill", fill_value=0)
  return x.reshape(*shape, x.shape[-1])


def from_padded(x: Array, pack: Packing | None) -> Array:
  """`[B, L, C]` -> rows `[N, C]`: the packed real tokens, or all `B * L` positions."""
  x = x.reshape(-1, x.shape[-1])
  return x if pack is None else jnp.take(x, pack.rows, axis=0, mode="clip")


def xla_attention(qkv: Array, bias: Array, pack: Packing | None, heads: int, scale: float) -> Array:
  """Attention `[N, H]` of qkv rows `[N, 3H]` (see `SelfAttention`) with XLA's ops."""
  b, l, h = bias.shape[0], bias.shape[-1], qkv.shape[-1] // 3
  # Head-major [B, 3, n, L, d] in one transpose, so the per-sequence dots need none.
  qkv = to_padded(qkv, pack, (b, l)).reshape(b, l, 3, heads, h // heads).transpose(0, 2, 3, 1, 4)

  def attend(args):  # one sequence: qkv [3, n, L, d], bias [1, 1, L] -> [n, L, d]
    one, bias1 = args
    scores = jnp.einsum("nqd,nkd->nqk", one[0], one[1]).astype(jnp.float32) * scale + bias1
    # Softmax with the division after the value product: [n, L, d] divides, not [n, L, L].
    e = jnp.exp(scores - lax.stop_gradient(scores.max(-1, keepdims=True)))
    out = jnp.einsum("nqk,nkd->nqd", e.astype(qkv.dtype), one[2]).astype(jnp.float32)
    return (out / e.sum(-1, keepdims=True)).astype(qkv.dtype)

  # A few sequences at a time: their [n, L, L] scores stay in cache, where the whole
  # batch's [B, n, L, L] would not (about 2x faster on CPU at B = 32, L = 256).
  out = lax.map(attend, (qkv, bias), batch_size=ATTENTION_BATCH)  # [B, n, L, d]
  return from_padded(out.transpose(0, 2, 1, 3).reshape(b, l, h), pack)

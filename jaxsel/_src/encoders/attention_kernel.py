"""The attention kernel of `native/csrc/attention.cc` as a JAX function, beside its XLA
reference (`attention.xla_attention`), with its derivative (the XLA attention's). `native`
only loads the compiled library; the `ffi_call`, the `custom_vjp` and `applies` live here.

Shape legend: B batch, L tokens, H hidden size, N rows (B * L positions, or T packed tokens).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel._src import native
from jaxsel._src.encoders.attention import Packing, xla_attention

Array = jax.Array


def applies(qkv: Array, bias: Array, backend: str) -> bool:
  """Whether `native/csrc/attention.cc` serves: CPU, float32, `backend` allows it, and it is
  loaded."""
  return (jax.default_backend() == "cpu" and qkv.dtype == jnp.float32 and bias.dtype == jnp.float32
          and native.wanted(backend))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def attention(proj: Array, qkv_bias: Array, bias: Array, pack: Packing | None, heads: int,
              scale: float) -> Array:
  """`xla_attention(proj + qkv_bias, ...)` by the C++ kernel (`native/csrc/attention.cc`; check
  `applies` first). `proj` `[N, 3H]`, `qkv_bias` `[3H]`: the kernel adds the bias as
  it reads the rows, which saves XLA a pass over them.

  The kernel reads the rows in place, sequence by sequence: the packed real tokens when
  `pack` is given (sequence b's tokens are consecutive rows there, since `packing` keeps
  them in order), else each sequence's `L` positions, its keys after the last unmasked one
  skipped (their softmax weight is exactly 0). So attention costs the real tokens, not the
  bucket length, and needs no `[B, n, L, d]` copy. The filler rows of a pack come out zero
  (junk on the XLA path; `BertModel` drops them). Gradients are the XLA path's."""
  b, l = bias.shape[0], bias.shape[-1]
  bias = bias.reshape(b * l)
  if pack is None:
    bounds = jnp.arange(b + 1, dtype=jnp.int32) * l
  else:
    lengths = jnp.sum(pack.unpack.reshape(b, l) < pack.rows.shape[0], axis=1, dtype=jnp.int32)
    bounds = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(lengths, dtype=jnp.int32)])
    bias = jnp.take(bias, pack.rows, axis=0, mode="clip")  # [T]: each packed row's key bias
  call = jax.ffi.ffi_call("jaxsel_attention",
                          jax.ShapeDtypeStruct((*proj.shape[:-1], proj.shape[-1] // 3), proj.dtype),
                          vmap_method="broadcast_all")
  return call(proj, qkv_bias, bias, bounds, heads=np.int64(heads), scale=np.float32(scale))


def _attention_fwd(proj, qkv_bias, bias, pack, heads, scale):
  return attention(proj, qkv_bias, bias, pack, heads, scale), (proj, qkv_bias, bias, pack)


def _attention_bwd(heads, scale, res, g):
  proj, qkv_bias, bias, pack = res
  _, vjp = jax.vjp(lambda p, c, m: xla_attention(p + c, m, pack, heads, scale), proj, qkv_bias, bias)
  return (*vjp(g), None)


attention.defvjp(_attention_fwd, _attention_bwd)

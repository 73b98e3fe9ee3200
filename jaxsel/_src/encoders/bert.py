"""Flax nnx BERT-family encoder (BERT/MiniLM/BGE/E5 and XLM-RoBERTa) and classifier heads.

Shape legend: B batch, L tokens, H hidden size, C classifier labels, N rows (B * L positions,
or T packed real tokens).

Attribute names mirror the Hugging Face PyTorch modules, so a parameter's nnx path
(`encoder.layer.0.attention.self.query.kernel`) maps to its checkpoint key
(`encoder.layer.0.attention.self.query.weight`) by renaming the leaf only; see
`jaxsel.encoders.loading`. Dropout is absent: these modules are for inference.

Numerics: parameters may be float32 or bfloat16; LayerNorm statistics and the attention
softmax are always computed in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxsel._src.encoders import attention_kernel
from jaxsel._src.encoders.attention import Packing, from_padded, packing, to_padded, xla_attention
from jaxsel._src.encoders.config import EncoderConfig

Array = jax.Array


def activation(name: str):
  if name == "gelu":
    return lambda x: jax.nn.gelu(x, approximate=False)
  if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
    return lambda x: jax.nn.gelu(x, approximate=True)
  if name == "relu":
    return jax.nn.relu
  if name in ("silu", "swish"):
    return jax.nn.silu
  if name == "tanh":
    return jnp.tanh
  raise ValueError(f"Unsupported activation {name!r}.")


class ShapeOnly:
  """Stands in for `nnx.Rngs` to build a module's structure alone: every parameter is a
  `jax.ShapeDtypeStruct`, what `nnx.eval_shape` gives, without tracing each initialiser
  (MiniLM: 0.05 CPU s instead of 0.35, a part of every process that loads an encoder). The
  loader (`loading.load_into`) then fills each parameter from the checkpoint."""

  def params(self) -> None:
    return None  # the "key" the modules hand their initialisers, which `_init` ignores


def _shape(key, shape, dtype=jnp.float32) -> jax.ShapeDtypeStruct:
  del key
  return jax.ShapeDtypeStruct(tuple(shape), dtype)


def _init(rngs, initializer):
  """`initializer`, or for a `ShapeOnly` build one that gives the parameter's shape alone."""
  return _shape if isinstance(rngs, ShapeOnly) else initializer


class LayerNorm(nnx.Module):
  """LayerNorm with float32 statistics whatever the parameter dtype."""

  def __init__(self, size: int, eps: float, *, dtype, rngs: nnx.Rngs):
    self.scale = nnx.Param(_init(rngs, nnx.initializers.ones)(None, (size,), dtype))
    self.bias = nnx.Param(_init(rngs, nnx.initializers.zeros)(None, (size,), dtype))
    self.eps = eps

  def __call__(self, x: Array) -> Array:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
    y = y * self.scale[...].astype(jnp.float32) + self.bias[...].astype(jnp.float32)
    return y.astype(x.dtype)


def _linear(n_in: int, n_out: int, dtype, rngs: nnx.Rngs) -> nnx.Linear:
  return nnx.Linear(n_in, n_out, dtype=dtype, param_dtype=dtype,
                    kernel_init=_init(rngs, nnx.initializers.normal(0.02)),
                    bias_init=_init(rngs, nnx.initializers.zeros), rngs=rngs)


class Embeddings(nnx.Module):

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    init = _init(rngs, nnx.initializers.normal(0.02))
    embed = lambda n: nnx.Embed(n, cfg.hidden_size, dtype=dtype, param_dtype=dtype,
                                embedding_init=init, rngs=rngs)
    self.word_embeddings = embed(cfg.vocab_size)
    self.position_embeddings = embed(cfg.max_position_embeddings)
    self.token_type_embeddings = embed(cfg.type_vocab_size) if cfg.type_vocab_size else None
    self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, dtype=dtype, rngs=rngs)
    self.cfg = cfg

  def __call__(self, input_ids: Array, token_type_ids: Array | None) -> Array:
    cfg = self.cfg
    if cfg.padded_positions:
      # RoBERTa: positions pad+1, pad+2, ... over non-pad tokens; pads sit at `pad`.
      not_pad = (input_ids != cfg.pad_token_id).astype(jnp.int32)
      positions = jnp.cumsum(not_pad, axis=1) * not_pad + cfg.pad_token_id
    else:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
    if self.token_type_embeddings is not None:
      if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
      x = x + self.token_type_embeddings(token_type_ids)
    return self.LayerNorm(x)


class SelfAttention(nnx.Module):

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    h = cfg.hidden_size
    self.query = _linear(h, h, dtype, rngs)
    self.key = _linear(h, h, dtype, rngs)
    self.value = _linear(h, h, dtype, rngs)
    self.heads = cfg.num_attention_heads
    self.backend = cfg.backend

  def __call__(self, x: Array, bias: Array, pack: Packing | None = None) -> Array:
    """x `[N, H]` rows, bias `[B, 1, 1, L]` (0 or a large negative) -> `[N, H]`.

    The rows are the `B * L` positions, or the packed real tokens when `pack` is given.
    On CPU in float32 a C++ kernel attends (`attention_kernel`, per `cfg.backend`); elsewhere
    XLA does.
    """
    h = x.shape[-1]
    # One [H, 3H] matmul instead of three [H, H] ones: larger GEMMs run faster on CPU.
    kernel = jnp.concatenate([self.query.kernel[...], self.key.kernel[...],
                              self.value.kernel[...]], axis=1)
    bias_qkv = jnp.concatenate([self.query.bias[...], self.key.bias[...], self.value.bias[...]])
    proj, bias_qkv = x @ kernel.astype(x.dtype), bias_qkv.astype(x.dtype)
    scale = (h // self.heads) ** -0.5
    if attention_kernel.applies(proj, bias, self.backend):
      return attention_kernel.attention(proj, bias_qkv, bias, pack, self.heads, scale)
    return xla_attention(proj + bias_qkv, bias, pack, self.heads, scale)


class DenseNorm(nnx.Module):
  """`LayerNorm(dense(x) + residual)`: BERT's `SelfOutput` and `Output`."""

  def __init__(self, n_in: int, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    self.dense = _linear(n_in, cfg.hidden_size, dtype, rngs)
    self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, dtype=dtype, rngs=rngs)

  def __call__(self, x: Array, residual: Array) -> Array:
    return self.LayerNorm(self.dense(x) + residual)


class Attention(nnx.Module):

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    self.self = SelfAttention(cfg, dtype=dtype, rngs=rngs)
    self.output = DenseNorm(cfg.hidden_size, cfg, dtype=dtype, rngs=rngs)

  def __call__(self, x: Array, bias: Array, pack: Packing | None = None) -> Array:
    return self.output(self.self(x, bias, pack), x)


class Intermediate(nnx.Module):

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    self.dense = _linear(cfg.hidden_size, cfg.intermediate_size, dtype, rngs)
    self.act = cfg.hidden_act

  def __call__(self, x: Array) -> Array:
    return activation(self.act)(self.dense(x))


class Layer(nnx.Module):

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    self.attention = Attention(cfg, dtype=dtype, rngs=rngs)
    self.intermediate = Intermediate(cfg, dtype=dtype, rngs=rngs)
    self.output = DenseNorm(cfg.intermediate_size, cfg, dtype=dtype, rngs=rngs)

  def __call__(self, x: Array, bias: Array, pack: Packing | None = None) -> Array:
    a = self.attention(x, bias, pack)
    return self.output(self.intermediate(a), a)


class Layers(nnx.Module):
  """The layer stack (`encoder` in the checkpoints)."""

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    self.layer = nnx.List([Layer(cfg, dtype=dtype, rngs=rngs)
                           for _ in range(cfg.num_hidden_layers)])

  def __call__(self, x: Array, bias: Array, pack: Packing | None = None) -> Array:
    """x `[N, H]` rows (see `SelfAttention`) -> `[N, H]`."""
    for layer in self.layer:
      x = layer(x, bias, pack)
    return x


class Pooler(nnx.Module):
  """BERT's pooler: `tanh(dense(h[:, 0]))`."""

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    self.dense = _linear(cfg.hidden_size, cfg.hidden_size, dtype, rngs)

  def __call__(self, hidden: Array) -> Array:
    return jnp.tanh(self.dense(hidden[:, 0]))


class BertModel(nnx.Module):
  """The backbone: `(input_ids, attention_mask, token_type_ids)` -> hidden states `[B, L, H]`.

  Mirrors `transformers.BertModel` / `XLMRobertaModel` (which family is `cfg.model_type`).
  """

  def __init__(self, cfg: EncoderConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    self.embeddings = Embeddings(cfg, dtype=dtype, rngs=rngs)
    self.encoder = Layers(cfg, dtype=dtype, rngs=rngs)
    self.pooler = Pooler(cfg, dtype=dtype, rngs=rngs) if cfg.pooler else None
    self.cfg = cfg

  def __call__(self, input_ids: Array, attention_mask: Array,
               token_type_ids: Array | None = None, *, tokens: int | None = None) -> Array:
    """`input_ids` `[B, L]` int, `attention_mask` `[B, L]` (1/True = real token) -> `[B, L, H]`.

    `tokens` (static): run the dense layers on this many packed rows instead of all `B * L`
    positions; it must be at least the number of real tokens. Padding then costs only
    attention, and the output is zero on pads (which are junk otherwise).
    """
    if tokens is not None and not 0 < tokens <= input_ids.size:
      raise ValueError(f"`tokens` must be in [1, B * L] = [1, {input_ids.size}], got {tokens}.")
    valid = attention_mask.astype(bool)[:, None, None, :]
    bias = jnp.where(valid, 0.0, jnp.finfo(jnp.float32).min).astype(jnp.float32)
    pack = None if tokens is None else packing(attention_mask, tokens)
    x = from_padded(self.embeddings(input_ids, token_type_ids), pack)
    return to_padded(self.encoder(x, bias, pack), pack, input_ids.shape)

  def pooled(self, hidden: Array) -> Array:
    """The pooler output `[B, H]` (needs `cfg.pooler`)."""
    if self.pooler is None:
      raise ValueError("This model was built without a pooler (`EncoderConfig.pooler=False`).")
    return self.pooler(hidden)


class ClassificationHead(nnx.Module):
  """RoBERTa's sequence-classification head: `out_proj(tanh(dense(h[:, 0])))`."""

  def __init__(self, cfg: EncoderConfig, *, dtype, rngs: nnx.Rngs):
    self.dense = _linear(cfg.hidden_size, cfg.hidden_size, dtype, rngs)
    self.out_proj = _linear(cfg.hidden_size, cfg.num_labels, dtype, rngs)

  def __call__(self, hidden: Array) -> Array:
    return self.out_proj(jnp.tanh(self.dense(hidden[:, 0])))


class SequenceClassifier(nnx.Module):
  """`*ForSequenceClassification`: backbone + head -> logits `[B, C]`.

  BERT: `classifier(pooler(h))`; XLM-R: `ClassificationHead(h)` (no pooler). The backbone
  attribute is `bert` or `roberta`, as in the checkpoints' keys.
  """

  def __init__(self, cfg: EncoderConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    if cfg.num_labels < 1:
      raise ValueError("A sequence classifier needs `num_labels >= 1` in its config.")
    self.cfg = cfg
    if cfg.padded_positions:
      self.roberta = BertModel(cfg.replace(pooler=False), dtype=dtype, rngs=rngs)
      self.classifier = ClassificationHead(cfg, dtype=dtype, rngs=rngs)
    else:
      self.bert = BertModel(cfg.replace(pooler=True), dtype=dtype, rngs=rngs)
      self.classifier = _linear(cfg.hidden_size, cfg.num_labels, dtype, rngs)

  @property
  def backbone(self) -> BertModel:
    return self.roberta if self.cfg.padded_positions else self.bert

  def __call__(self, input_ids: Array, attention_mask: Array,
               token_type_ids: Array | None = None) -> Array:
    hidden = self.backbone(input_ids, attention_mask, token_type_ids)
    if self.cfg.padded_positions:
      return self.classifier(hidden)
    return self.classifier(self.backbone.pooled(hidden))

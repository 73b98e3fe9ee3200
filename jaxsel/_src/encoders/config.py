"""Frozen configuration of a BERT-family encoder, built from a Hugging Face `config.json`.

Two families share one module (`jaxsel._src.encoders.bert`):

* ``"bert"`` — BERT, MiniLM, BGE, E5: absolute positions ``0..L-1``, token types.
* ``"xlm-roberta"`` (also ``"roberta"``) — XLM-RoBERTa / BGE-M3's backbone: positions
  start after the padding index and skip padding tokens; token types are all zero.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
from pathlib import Path
from typing import Any

from jaxsel._src import checks
from jaxsel._src.base import BACKENDS

BERT_TYPES = ("bert",)
ROBERTA_TYPES = ("xlm-roberta", "roberta", "camembert")

# The config.json keys from which `from_pretrained` builds the config without `transformers`
# (the rest keep transformers' defaults: absolute positions).
JSON_KEYS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size",
             "layer_norm_eps", "pad_token_id")

_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish", "tanh")


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """Shape and numerics of an encoder. Hashable, so it can be a static jit argument.

  `num_labels` is 0 for a bare encoder and the classifier width for a cross-encoder;
  `pooler` says whether the BERT pooler (dense + tanh on the first token) exists;
  `backend` where attention runs: ``"auto"`` (the native CPU kernel where it applies),
  ``"native"`` or ``"xla"`` (see `jaxsel._src.native`).
  """
  model_type: str = "bert"
  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  pad_token_id: int = 0
  pooler: bool = True
  num_labels: int = 0
  backend: str = "auto"

  def __post_init__(self):
    if self.model_type not in BERT_TYPES + ROBERTA_TYPES:
      raise ValueError(f"Unsupported `model_type` {self.model_type!r}; jaxsel ports "
                       f"{BERT_TYPES + ROBERTA_TYPES}.")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f"`hidden_size` {self.hidden_size} is not divisible by "
                       f"`num_attention_heads` {self.num_attention_heads}.")
    if self.hidden_act not in _ACTIVATIONS:
      raise ValueError(f"Unsupported `hidden_act` {self.hidden_act!r}; use one of {_ACTIVATIONS}.")
    if self.num_labels < 0:
      raise ValueError(f"`num_labels` must be >= 0, got {self.num_labels}.")
    checks.choice(self.backend, "backend", BACKENDS)

  @property
  def padded_positions(self) -> bool:
    """True for the RoBERTa family: positions count from `pad_token_id + 1`, skipping pads."""
    return self.model_type in ROBERTA_TYPES

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_attention_heads

  @property
  def max_tokens(self) -> int:
    """Longest input the position table allows (RoBERTa loses `pad_token_id + 1` slots)."""
    if self.padded_positions:
      return self.max_position_embeddings - self.pad_token_id - 1
    return self.max_position_embeddings

  def replace(self, **kw) -> "EncoderConfig":
    return dataclasses.replace(self, **kw)

  @classmethod
  def from_hf(cls, hf_config: Any, **overrides) -> "EncoderConfig":
    """From a `transformers.PretrainedConfig` (BertConfig, XLMRobertaConfig, ...)."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in BERT_TYPES + ROBERTA_TYPES:
      raise ValueError(f"Checkpoint has model_type {model_type!r}; jaxsel's encoders port "
                       f"{BERT_TYPES + ROBERTA_TYPES}.")
    pos = getattr(hf_config, "position_embedding_type", "absolute") or "absolute"
    if pos != "absolute":
      raise ValueError(f"position_embedding_type {pos!r} is not ported; only 'absolute'.")
    act = hf_config.hidden_act
    if not isinstance(act, str):
      raise ValueError(f"`hidden_act` must be a name, got {act!r}.")
    pad = hf_config.pad_token_id
    kw = dict(
        model_type=model_type,
        vocab_size=hf_config.vocab_size,
        hidden_size=hf_config.hidden_size,
        num_hidden_layers=hf_config.num_hidden_layers,
        num_attention_heads=hf_config.num_attention_heads,
        intermediate_size=hf_config.intermediate_size,
        hidden_act=act,
        max_position_embeddings=hf_config.max_position_embeddings,
        type_vocab_size=getattr(hf_config, "type_vocab_size", 0) or 0,
        layer_norm_eps=float(hf_config.layer_norm_eps),
        pad_token_id=0 if pad is None else int(pad),
    )
    kw.update(overrides)
    return cls(**kw)

  @classmethod
  def from_pretrained(cls, path: str | os.PathLike, **overrides) -> "EncoderConfig":
    """From a checkpoint folder's `config.json`: read as JSON when it names every one of
    `JSON_KEYS` (no `transformers` import, seconds with PyTorch behind it), else by
    `transformers.AutoConfig`, which fills in the model type's defaults."""
    file = Path(os.fspath(path)) / "config.json"
    raw = json.loads(file.read_text("utf-8")) if file.is_file() else {}
    if isinstance(raw, dict) and all(k in raw for k in JSON_KEYS):
      return cls.from_hf(types.SimpleNamespace(**raw), **overrides)
    import transformers  # seconds to import: only configs that leave keys to its defaults
    return cls.from_hf(transformers.AutoConfig.from_pretrained(os.fspath(path)), **overrides)

  def to_hf(self):
    """The matching `transformers` config (used by tests to build a PyTorch reference)."""
    import transformers  # seconds to import: tests and conversions only
    kw = dict(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
              num_hidden_layers=self.num_hidden_layers,
              num_attention_heads=self.num_attention_heads,
              intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
              max_position_embeddings=self.max_position_embeddings,
              type_vocab_size=self.type_vocab_size, layer_norm_eps=self.layer_norm_eps,
              pad_token_id=self.pad_token_id, num_labels=max(self.num_labels, 1))
    if self.padded_positions:
      return transformers.XLMRobertaConfig(**kw)
    return transformers.BertConfig(**kw)

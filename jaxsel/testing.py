"""Tiny random models for tests, yours and ours: real jaxsel encoders and cross-encoders on a
2-layer, 32-wide BERT (or XLM-RoBERTa) with a character-level tokenizer. They run the same
code as a loaded checkpoint, fast, with no weights to download.

    enc = jaxsel.testing.tiny_encoder()           # a SentenceEncoder
    ce = jaxsel.testing.tiny_cross_encoder()      # a CrossEncoder
    pipe = jaxsel.Pipeline(enc)                   # the whole pipeline on it
"""

from __future__ import annotations

import string
from typing import Optional

import jax
import jax.numpy as jnp
import transformers
from flax import nnx
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from jaxsel._src.encoders.bert import BertModel, SequenceClassifier
from jaxsel._src.encoders.config import EncoderConfig
from jaxsel._src.encoders.cross import CrossEncoder
from jaxsel._src.encoders.sentence import SentenceEncoder

__all__ = [
    "random_model",
    "tiny_bert_config",
    "tiny_cross_encoder",
    "tiny_encoder",
    "tiny_tokenizer",
    "tiny_xlmr_config",
]


def tiny_bert_config(**overrides) -> EncoderConfig:
  """A 2-layer, 32-wide BERT for tests (vocabulary of `tiny_tokenizer`)."""
  kw = dict(model_type="bert", vocab_size=128, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
            type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0)
  kw.update(overrides)
  return EncoderConfig(**kw)


def tiny_xlmr_config(**overrides) -> EncoderConfig:
  """A 2-layer, 32-wide XLM-RoBERTa (pad id 1, positions offset by 2, one token type)."""
  kw = dict(model_type="xlm-roberta", max_position_embeddings=66, type_vocab_size=1,
            layer_norm_eps=1e-5, pad_token_id=1)
  kw.update(overrides)
  return tiny_bert_config(**kw)


def tiny_tokenizer(model_type: str = "bert", *, max_length: int = 64):
  """A character-level WordPiece tokenizer (lowercase letters, digits, punctuation).

  Its 99 ids fit `tiny_bert_config()`'s vocabulary of 128. `model_type="xlm-roberta"` uses
  RoBERTa's special tokens (`<s>`=0, `<pad>`=1, `</s>`=2) and no token types.
  """
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


def tiny_cross_encoder(config: Optional[EncoderConfig] = None, *, seed: int = 0,
                       num_labels: int = 1) -> CrossEncoder:
  """A random-weight cross-encoder (default `tiny_bert_config()`) with `tiny_tokenizer`."""
  cfg = (config or tiny_bert_config()).replace(num_labels=num_labels)
  model = random_model(lambda rngs, dtype: SequenceClassifier(cfg, dtype=dtype, rngs=rngs), seed)
  return CrossEncoder(model, tiny_tokenizer(cfg.model_type, max_length=cfg.max_tokens),
                      name="tiny")

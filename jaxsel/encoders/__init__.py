"""Flax nnx ports of BERT-family encoders and cross-encoders, loading Hugging Face checkpoints.

    enc = load_encoder(name_or_path)        -> SentenceEncoder (encode, encode_chunks, apply_fn)
    ce = load_cross_encoder(name_or_path)   -> CrossEncoder (score, logits_fn)

Jit-able entry points for other modules:
    enc.apply_fn(input_ids [B, L] int32, attention_mask [B, L], token_type_ids=None) -> [B, D]
    ce.logits_fn(input_ids [B, L] int32, attention_mask [B, L], token_type_ids=None) -> [B, C]
(and `enc.apply(enc.params, ...)` / `ce.apply(ce.params, ...)`, pure in the weights), with
`.tokenizer`, `.cls_token_id`, `.sep_token_id`, `.pad_token_id`, `.max_length`.

Tests and other modules can use random tiny models: `tiny_encoder()`, `tiny_cross_encoder()`
(on `tiny_bert_config()` / `tiny_xlmr_config()` and the character-level `tiny_tokenizer()`).
"""

from jaxsel.encoders.config import EncoderConfig, tiny_bert_config, tiny_xlmr_config
from jaxsel.encoders.bert import BertModel, SequenceClassifier
from jaxsel.encoders.loading import CheckpointError, read_state_dict, resolve_checkpoint
from jaxsel.encoders.encoder import (
    DEFAULT_ENCODER, PROMPT_PRESETS, SentenceEncoder, TokenEmbeddings, default_encoder_path,
    load_encoder, tiny_encoder, tiny_tokenizer)
from jaxsel.encoders.cross_encoder import CrossEncoder, load_cross_encoder, tiny_cross_encoder

__all__ = [
    "BertModel",
    "CheckpointError",
    "CrossEncoder",
    "DEFAULT_ENCODER",
    "EncoderConfig",
    "PROMPT_PRESETS",
    "SentenceEncoder",
    "SequenceClassifier",
    "TokenEmbeddings",
    "default_encoder_path",
    "load_cross_encoder",
    "load_encoder",
    "read_state_dict",
    "resolve_checkpoint",
    "tiny_bert_config",
    "tiny_cross_encoder",
    "tiny_encoder",
    "tiny_tokenizer",
    "tiny_xlmr_config",
]

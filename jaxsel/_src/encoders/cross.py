"""Cross-encoders (`*ForSequenceClassification` checkpoints, BERT and XLM-R heads) in JAX.

Shape legend: B batch, L tokens, C labels, P passages.

    ce = jaxsel.load_cross_encoder("cross-encoder/ms-marco-MiniLM-L-6-v2")  # or a folder
    ce.score("who wrote it?", passages)             # [P] logits (or [P, C] when C > 1)

For use inside `jit` / `vmap` (e.g. a search scorer that assembles token sequences):

    ce.logits_fn(input_ids, attention_mask, token_type_ids=None) -> [B, C]
        `input_ids` `[B, L]` int32, `attention_mask` `[B, L]` (1 = real token);
        closes over the weights.
    ce.apply(params, input_ids, attention_mask, token_type_ids=None) -> [B, C]
        the same as a pure function of `ce.params`.
    ce.tokenizer, ce.cls_token_id, ce.sep_token_id, ce.pad_token_id, ce.max_length

A BERT pair is `[CLS] query [SEP] passage [SEP]` with token types 0 then 1; an XLM-R pair
is `<s> query </s></s> passage </s>` without token types.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import jax
import jax.numpy as jnp
from flax import nnx

from jaxsel._src import checks, native
from jaxsel._src.encoders import loading
from jaxsel._src.encoders.batching import (bucketed_batches, check_batch_size, jit_encoder,
                                           progress_bar)
from jaxsel._src.encoders.bert import SequenceClassifier, ShapeOnly
from jaxsel._src.encoders.config import EncoderConfig
from jaxsel._src.encoders.sentence import TokenizedModel
from jaxsel._src.encoders.tokenizer import load_tokenizer

Array = jax.Array


@jit_encoder("graphdef")
def _logits(graphdef, params, input_ids, attention_mask, token_type_ids):
  model = nnx.merge(graphdef, params)
  return model(input_ids, attention_mask, token_type_ids).astype(jnp.float32)


class CrossEncoder(TokenizedModel):
  """A loaded cross-encoder: `params`, nnx `graphdef`, tokenizer and `max_length`."""

  def __init__(self, model: SequenceClassifier, tokenizer, *, max_length: Optional[int] = None,
               name: str = ""):
    super().__init__(model, tokenizer, max_length=max_length, name=name)

  def __repr__(self):
    c = self.config
    return (f"CrossEncoder({self.name or c.model_type!s}, layers={c.num_hidden_layers}, "
            f"labels={c.num_labels}, max_length={self.max_length})")

  @property
  def num_labels(self) -> int:
    return self.config.num_labels

  @property
  def pair_format(self) -> dict:
    """How this model's tokenizer joins a (query, passage) pair, as `jaxsel.cross_encoder_scorer`
    takes it: `pair_sep` separators between the two texts (1 for BERT's `[SEP]`, 2 for
    RoBERTa / XLM-R's `</s></s>`) and the second text's `chunk_type` (0 without token types)."""
    enc = self.tokenizer("a", "b")
    ids = list(enc["input_ids"])
    first = ids.index(self.sep_token_id)
    pair_sep = 1
    while first + pair_sep < len(ids) and ids[first + pair_sep] == self.sep_token_id:
      pair_sep += 1
    types = enc.get("token_type_ids") if self._uses_type_ids else None
    chunk_type = int(types[-1]) if types else 0
    return {"pair_sep": pair_sep, "chunk_type": chunk_type}

  def apply(self, params, input_ids, attention_mask, token_type_ids=None) -> Array:
    """Pure: `[B, L]` ids and mask (+ optional token types) -> logits `[B, C]` float32."""
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    return _logits(self.graphdef, params, input_ids, attention_mask, token_type_ids)

  def logits_fn(self, input_ids, attention_mask, token_type_ids=None) -> Array:
    """`[B, L]` ids and mask -> logits `[B, C]` float32, with this model's weights."""
    return self.apply(self.params, input_ids, attention_mask, token_type_ids)

  def score(self, query: str, passages: Sequence[str], *, batch_size: int = 32,
            progress: Optional[bool] = None) -> Array:
    """Logits of `(query, passage)` pairs: `[P]` for one label, else `[P, C]`.

    Pairs longer than `max_length` lose tokens from their longer side first.
    """
    if not isinstance(query, str):
      raise TypeError(f"`query` must be a str, got {type(query).__name__}.")
    checks.check_unicode(query, "query")
    passages = checks.check_texts(passages, "passages", allow_empty=False)
    batch_size = check_batch_size(batch_size)
    enc = self.tokenizer([query] * len(passages), passages, truncation=True,
                         max_length=self.max_length, padding=False)
    ids = enc["input_ids"]
    type_ids = enc.get("token_type_ids") if self._uses_type_ids else None
    out = np.zeros((len(passages), self.num_labels), np.float32)
    with progress_bar(-(-len(passages) // batch_size), progress, "score") as bar:
      for index, input_ids, mask, tt in bucketed_batches(
          ids, type_ids, batch_size=batch_size, max_length=self.max_length,
          pad_id=self.pad_token_id):
        res = np.asarray(_logits(self.graphdef, self.params, input_ids, mask, tt))
        out[index[index >= 0]] = res[index >= 0]
        bar.update(1)
    return jnp.asarray(out[:, 0] if self.num_labels == 1 else out)


def load_cross_encoder(name_or_path, *, dtype=jnp.float32, max_length: Optional[int] = None,
                       backend: str = "auto") -> CrossEncoder:
  """Loads a `BertForSequenceClassification` / `XLMRobertaForSequenceClassification` checkpoint.

  `name_or_path` is a local folder or a Hugging Face hub id (downloaded when online);
  `backend` as in `jaxsel.load_encoder`.
  """
  native.check_backend(backend)
  folder = loading.checkpoint_folder(name_or_path, dtype)
  import transformers  # seconds to import: the classifier head's settings need its AutoConfig
  hf = transformers.AutoConfig.from_pretrained(str(folder))
  archs = getattr(hf, "architectures", None) or []
  if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
    raise ValueError(f"{name_or_path} is a {archs} checkpoint, not *ForSequenceClassification; "
                     "load bare encoders with `jaxsel.load_encoder`.")
  cfg = EncoderConfig.from_hf(hf, num_labels=int(hf.num_labels), backend=backend)
  state = loading.normalise_keys(loading.read_state_dict(folder))
  backbone = "roberta." if cfg.padded_positions else "bert."
  loading.backbone_prefix(state, (backbone,))  # raises unless the backbone sits under it
  model = loading.load_into(SequenceClassifier(cfg, dtype=dtype, rngs=ShapeOnly()), state,
                            dtype=dtype)
  tok = load_tokenizer(folder)
  return CrossEncoder(model, tok, max_length=max_length, name=str(name_or_path))

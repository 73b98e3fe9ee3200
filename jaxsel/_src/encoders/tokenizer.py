"""A checkpoint's tokenizer read straight from its `tokenizer.json` (the `tokenizers` library),
without importing `transformers` (a second or more, and PyTorch behind it).

`load_tokenizer(folder)` returns a `FastTokenizer` for the checkpoints whose Hugging Face
tokenizer is exactly the pipeline of their `tokenizer.json` (BERT-family WordPiece: BERT,
MiniLM, BGE, E5), and `transformers.AutoTokenizer.from_pretrained(folder)` for every other one
(slow tokenizers, XLM-R, a `tokenizer_config.json` whose settings differ from the file's).

A `FastTokenizer` answers the calls of a Hugging Face fast tokenizer that jaxsel makes (a text
or a list of texts, optionally paired; `truncation=`, `max_length=`, `add_special_tokens=`,
`return_offsets_mapping=`) with the same ids, token types, masks and offsets, and the special
token ids. Any other call or attribute (`decode`, `padding=True`, `return_tensors=`, ...) goes
to the `transformers` tokenizer of the same folder, loaded on first use, so it behaves as one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import tokenizers

# The `tokenizer_class` values whose transformers tokenizer is the tokenizer.json pipeline.
WORDPIECE_CLASSES = ("BertTokenizer", "BertTokenizerFast")
# transformers' `model_max_length` when the config names none (its VERY_LARGE_INTEGER).
UNLIMITED = int(1e30)
SPECIAL_TOKENS = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "unk_token": "[UNK]", "mask_token": "[MASK]"}
# Keyword arguments answered here (with these values); anything else goes to transformers.
_HANDLED = {"add_special_tokens", "truncation", "max_length", "padding", "return_offsets_mapping",
            "return_token_type_ids", "return_attention_mask", "verbose"}


class Encoded(dict):
  """What a call returns (like transformers' `BatchEncoding`): `input_ids`, `token_type_ids`
  (when the model takes them), `attention_mask`, `offset_mapping` (when asked), per text for a
  list of texts; `word_ids(i)` gives text i's word index of every token (None for specials)."""

  def __init__(self, data: dict, encodings: list):
    super().__init__(data)
    self.encodings = encodings

  def __getattr__(self, name):
    try:
      return self[name]
    except KeyError:
      raise AttributeError(name) from None

  def word_ids(self, batch_index: int = 0) -> list:
    return self.encodings[batch_index].word_ids


def _read_json(path: Path) -> dict:
  return json.loads(path.read_text("utf-8")) if path.is_file() else {}


def _content(token) -> Optional[str]:
  return token.get("content") if isinstance(token, dict) else token


class FastTokenizer:
  """A BERT-family tokenizer over `tokenizers.Tokenizer` (see the module docstring).

  Build one with `FastTokenizer.from_folder(folder)`, which returns None when the folder's
  tokenizer is not one this class reproduces exactly.
  """

  is_fast = True

  def __init__(self, backend: tokenizers.Tokenizer, *, name_or_path: str, special: dict,
               model_max_length: int, model_input_names: list, truncation_side: str = "right"):
    backend.no_truncation()
    backend.no_padding()
    self._backend = backend
    self._transformers = None
    self.name_or_path = name_or_path
    self.model_max_length = model_max_length
    self.model_input_names = list(model_input_names)
    self.truncation_side = truncation_side
    self.padding_side = "right"
    for attr, token in special.items():
      setattr(self, attr, token)
      setattr(self, attr + "_id", backend.token_to_id(token))

  @classmethod
  def from_folder(cls, folder: str | os.PathLike) -> Optional["FastTokenizer"]:
    """The folder's tokenizer, or None when only `transformers` reproduces it."""
    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
      return None
    cfg = _read_json(folder / "tokenizer_config.json")
    if cfg.get("tokenizer_class") not in WORDPIECE_CLASSES:
      return None
    backend = tokenizers.Tokenizer.from_file(os.fspath(folder / "tokenizer.json"))
    if not _bert_pipeline(backend, cfg):
      return None
    special_map = _read_json(folder / "special_tokens_map.json")
    special = {}
    for attr, default in SPECIAL_TOKENS.items():
      token = _content(cfg.get(attr, special_map.get(attr, default)))
      if token is None or backend.token_to_id(token) is None:
        return None
      special[attr] = token
    for key, token in (cfg.get("added_tokens_decoder") or {}).items():
      if backend.token_to_id(_content(token)) != int(key):
        return None
    if cfg.get("padding_side", "right") != "right" or cfg.get("add_prefix_space"):
      return None
    max_len = cfg.get("model_max_length")
    return cls(backend, name_or_path=os.fspath(folder), special=special,
               model_max_length=UNLIMITED if max_len is None else int(max_len),
               model_input_names=cfg.get("model_input_names") or
               ["input_ids", "token_type_ids", "attention_mask"],
               truncation_side=cfg.get("truncation_side", "right"))

  # -- what transformers would answer, from the backend

  @property
  def backend_tokenizer(self) -> tokenizers.Tokenizer:
    return self._backend

  @property
  def vocab_size(self) -> int:
    return self._backend.get_vocab_size(with_added_tokens=False)

  def __len__(self) -> int:
    return self._backend.get_vocab_size(with_added_tokens=True)

  def num_special_tokens_to_add(self, pair: bool = False) -> int:
    return self._backend.num_special_tokens_to_add(pair)

  def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
    if skip_special_tokens:
      return self.transformers.convert_ids_to_tokens(ids, skip_special_tokens=True)
    if isinstance(ids, int):
      return self._backend.id_to_token(ids)
    return [self._backend.id_to_token(int(i)) for i in ids]

  def convert_tokens_to_ids(self, tokens):
    if isinstance(tokens, str):
      return self._token_id(tokens)
    return [self._token_id(t) for t in tokens]

  def _token_id(self, token: str) -> int:
    i = self._backend.token_to_id(token)
    return self.unk_token_id if i is None else i

  def decode(self, *args, **kwargs):
    return self.transformers.decode(*args, **kwargs)

  def batch_decode(self, *args, **kwargs):
    return self.transformers.batch_decode(*args, **kwargs)

  def __call__(self, text, text_pair=None, **kwargs):
    """Token ids (and types, mask, offsets) of `text` (a str or a list of them), paired with
    `text_pair` when given, as transformers' fast tokenizer gives them."""
    if not self._handles(text, text_pair, kwargs):
      return self.transformers(text, text_pair, **kwargs)
    batched = isinstance(text, (list, tuple))
    texts = list(text) if batched else [text]
    if text_pair is not None:
      pairs = list(text_pair) if batched else [text_pair]
      if len(pairs) != len(texts):
        return self.transformers(text, text_pair, **kwargs)
      texts = list(zip(texts, pairs))
    truncation = kwargs.get("truncation", False)
    self._truncate(kwargs.get("max_length") if truncation not in (False, None, "do_not_truncate")
                   else None)
    encodings = self._backend.encode_batch(texts, add_special_tokens=kwargs.get(
        "add_special_tokens", True))
    data = {"input_ids": [e.ids for e in encodings]}
    types = kwargs.get("return_token_type_ids")
    if types or (types is None and "token_type_ids" in self.model_input_names):
      data["token_type_ids"] = [e.type_ids for e in encodings]
    mask = kwargs.get("return_attention_mask")
    if mask or (mask is None and "attention_mask" in self.model_input_names):
      data["attention_mask"] = [e.attention_mask for e in encodings]
    if kwargs.get("return_offsets_mapping"):
      data["offset_mapping"] = [e.offsets for e in encodings]
    if not batched:
      data = {k: v[0] for k, v in data.items()}
    return Encoded(data, encodings)

  def _handles(self, text, text_pair, kwargs) -> bool:
    if set(kwargs) - _HANDLED or kwargs.get("padding", False) not in (False, "do_not_pad"):
      return False
    if kwargs.get("truncation", False) not in (False, None, True, "do_not_truncate",
                                               "longest_first"):
      return False
    if kwargs.get("truncation") in (True, "longest_first") and kwargs.get("max_length") is None:
      return False

    def strings(x):
      return isinstance(x, str) or (isinstance(x, (list, tuple)) and
                                    all(isinstance(t, str) for t in x))

    if not strings(text) or (text_pair is not None and not strings(text_pair)):
      return False
    return text_pair is None or isinstance(text, str) == isinstance(text_pair, str)

  def _truncate(self, max_length: Optional[int]) -> None:
    if max_length is None:
      if self._backend.truncation is not None:
        self._backend.no_truncation()
      return
    want = {"max_length": int(max_length), "stride": 0, "strategy": "longest_first",
            "direction": self.truncation_side}
    if self._backend.truncation != want:
      self._backend.enable_truncation(int(max_length), stride=0, strategy="longest_first",
                                      direction=self.truncation_side)

  # -- everything else: the transformers tokenizer of the same folder

  @property
  def transformers(self):
    """The `transformers` tokenizer of the same folder (loaded on first use)."""
    if self._transformers is None:
      import transformers  # seconds to import: only calls this class does not answer need it
      self._transformers = transformers.AutoTokenizer.from_pretrained(self.name_or_path)
    return self._transformers

  def __getattr__(self, name):
    if name.startswith("_"):
      raise AttributeError(name)
    return getattr(self.transformers, name)

  def __repr__(self):
    return f"FastTokenizer({self.name_or_path!r}, vocab_size={self.vocab_size})"


def _bert_pipeline(backend: tokenizers.Tokenizer, cfg: dict) -> bool:
  """Whether `backend` (tokenizer.json) is the WordPiece pipeline that transformers' BERT
  tokenizer builds from the settings of `cfg` (tokenizer_config.json)."""
  spec = json.loads(backend.to_str())
  norm, pre, post = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}, spec.get(
      "post_processor") or {}
  if (spec.get("model") or {}).get("type") != "WordPiece" or norm.get("type") != "BertNormalizer":
    return False
  if pre.get("type") != "BertPreTokenizer" or post.get("type") not in ("TemplateProcessing",
                                                                        "BertProcessing"):
    return False
  return (norm.get("lowercase") == cfg.get("do_lower_case", True)
          and norm.get("strip_accents") == cfg.get("strip_accents")
          and norm.get("handle_chinese_chars") == cfg.get("tokenize_chinese_chars", True)
          and norm.get("clean_text", True))


def load_tokenizer(folder: str | os.PathLike):
  """The tokenizer of a checkpoint folder: a `FastTokenizer` where it reproduces the Hugging
  Face one exactly, else `transformers.AutoTokenizer.from_pretrained(folder)`."""
  fast = FastTokenizer.from_folder(folder)
  if fast is not None:
    return fast
  import transformers  # seconds to import: only tokenizers FastTokenizer cannot read need it
  return transformers.AutoTokenizer.from_pretrained(os.fspath(folder))

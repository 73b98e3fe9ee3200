"""The Pipeline's embeddings: the encoder's prompts per role, one LRU cache, late chunks.

Shape legend: N texts (or passages), D embedding dimension.

Roles are ``"query"``, ``"passage"`` (asymmetric prompts, for relevance) and ``"symmetric"``
(passage-passage similarity); a role the encoder has no prompt for is embedded without one.
Every result goes through one cache keyed by (what was embedded, the prompt's text), shared
by the copies `Pipeline.replace` makes, so comparing methods embeds the texts once.
"""

from __future__ import annotations

import collections
from typing import Callable, Hashable, Optional, Sequence

import numpy as np


class EmbeddingCache:
  """The most recent embeddings, by key (least recently used dropped first)."""

  def __init__(self):
    self._items = collections.OrderedDict()

  def get(self, key: Hashable, compute: Callable[[], np.ndarray], *, size: int) -> np.ndarray:
    """The cached value of `key` (an array, or a tuple of arrays), else `compute()`, kept
    (read-only) when `size` > 0 with at most `size` entries."""
    if key in self._items:
      self._items.move_to_end(key)
      return self._items[key]
    out = compute()
    if size:
      for a in out if isinstance(out, tuple) else (out,):
        if isinstance(a, np.ndarray):
          a.flags.writeable = False  # shared by later calls: nobody may change it in place
      self._items[key] = out
      while len(self._items) > size:
        self._items.popitem(last=False)
    return out


class Embedder:
  """An encoder's normalised embeddings through a shared `EmbeddingCache`.

  Args:
    encoder: a `jaxsel.Encoder` (its `encode`, `prompts`, and `encode_chunks` for late chunks).
    cache: the cache to read and fill.
    batch_size, progress: passed to `encoder.encode`.
    cache_size: how many results the cache keeps (0: none are added).
  """

  def __init__(self, encoder, cache: EmbeddingCache, *, batch_size: int, progress: bool,
               cache_size: int):
    self.encoder = encoder
    self.cache = cache
    self.batch_size = batch_size
    self.progress = progress
    self.cache_size = cache_size

  def prompt_name(self, role: str) -> Optional[str]:
    """The encoder's prompt name for `role` when it defines one, else None (no prompt)."""
    return role if role in self.encoder.prompts else None

  def _prompt(self, role: str) -> Optional[str]:
    name = self.prompt_name(role)
    return self.encoder.prompts[name] if name else None

  def embed(self, texts: Sequence[str], role: str = "passage") -> np.ndarray:
    """Normalised embeddings `[N, D]` of `texts` with the encoder's prompt for `role`."""
    texts = list(texts)
    if not texts:
      raise ValueError("Nothing to embed: the input has no text.")
    name = self.prompt_name(role)
    return self.cache.get(
        (self._prompt(role), tuple(texts)),
        lambda: np.asarray(self.encoder.encode(texts, prompt_name=name, normalize=True,
                                               batch_size=self.batch_size,
                                               progress=self.progress), np.float32),
        size=self.cache_size)

  def passages(self, texts: Sequence[str]):
    """(asymmetric passage embeddings `[N, D]` for relevance, symmetric ones for similarity).

    Symmetric encoding uses the encoder's ``"symmetric"`` prompt if it has one, else no
    prompt; when that equals the passage prompt (e.g. all-MiniLM-L6-v2, which has none) the
    passages are embedded once.
    """
    e = self.embed(texts, "passage")
    prompts = self.encoder.prompts
    if prompts.get("symmetric", "") == prompts.get("passage", ""):
      return e, e
    return e, self.embed(texts, "symmetric")

  def late_chunks(self, documents: Sequence[str], passages: Sequence) -> np.ndarray:
    """`[N, D]`: each `Passage` pooled from its document's token states (the passage prompt)."""
    name = self.prompt_name("passage")
    spans = tuple((p.doc, p.start, p.end) for p in passages)

    def compute():
      out = np.zeros((len(passages), self.encoder.dim), np.float32)
      by_doc = collections.defaultdict(list)
      for i, p in enumerate(passages):
        by_doc[p.doc].append(i)
      for d, rows in by_doc.items():
        out[rows] = np.asarray(self.encoder.encode_chunks(
            documents[d], [(passages[i].start, passages[i].end) for i in rows], prompt_name=name))
      return out

    return self.cache.get(("late chunks", self._prompt("passage"), tuple(documents), spans),
                          compute, size=self.cache_size)


def check_late_chunking(encoder, config, prompt_name: Optional[str]) -> None:
  """Whether `encoder` can pool `config`'s candidates from their documents' tokens (late
  chunking): it has `encode_chunks`, and every passage fits one of its windows (words always
  do). `prompt_name`: the passage prompt's, which takes room in each window."""
  if not callable(getattr(encoder, "encode_chunks", None)):
    raise TypeError("late chunking (`late_chunking=True` or `unit='word'`) needs an encoder with "
                    "`encode_chunks(text, spans, ...)`, e.g. `jaxsel.load_encoder(...)`.")
  max_tokens, capacity_of = config.max_tokens, getattr(encoder, "chunk_capacity", None)
  if max_tokens is None or config.unit == "word" or not callable(capacity_of):
    return
  capacity = capacity_of(prompt_name=prompt_name)
  if max_tokens > capacity:
    raise ValueError(
        f"`max_tokens` {max_tokens} is longer than late chunking can embed: the encoder reads "
        f"{capacity} text tokens per window (its {getattr(encoder, 'max_length', '?')} "
        "positions less special and prompt tokens), and a passage must fit in one window. Use "
        f"max_tokens <= {capacity}, or late_chunking=False.")

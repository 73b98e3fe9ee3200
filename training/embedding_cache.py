"""An encoder whose embeddings are kept on disk, so an evaluation embeds each text once.

`CachedEncoder(encoder, path)` has the encoder's interface (`encode`, `tokenizer`, `prompts`,
`dim`, ...) and goes where the encoder goes (`jaxsel.Pipeline(CachedEncoder(...))`): a text
embedded before, with the same prompt, is read from memory; the others are embedded in one
call of the wrapped encoder. `save()` writes the cache as an `.npz` (atomically), keyed by
prompt and text and tagged with the encoder's name; a cache of another encoder is not read.

Embeddings are normalised as the Pipeline asks (`normalize=True`); other calls go straight
to the wrapped encoder. Batching changes an embedding by float rounding only (1e-7), so a
rerun from the cache selects what a fresh run selects, but for exact ties.

Why not the package's `EmbeddingStore` (`encode(..., cache=folder)`): that store keys a whole
call (the texts, their order, the batch settings), so a cached answer is bit-identical to an
uncached one, which is what a user's reruns need. Evaluations embed the same paragraph in
many groupings (one question's candidates, then its sentences, then another budget's batch),
so they need a cache per text, and accept rounding-level differences (1e-7) for it.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np

from training.files import atomic_savez


class CachedEncoder:
  """`encoder` with a disk cache of normalised embeddings at `path` (None: memory only)."""

  def __init__(self, encoder, path: Optional[str] = None, *, name: Optional[str] = None):
    self.encoder = encoder
    self.path = path
    self.encoder_name = name or getattr(encoder, "name", None) or type(encoder).__name__
    self._rows: dict = {}  # (prompt text, text) -> row of self._emb
    self._emb = np.zeros((0, int(encoder.dim)), np.float32)
    self._dirty = False
    if path is not None and os.path.exists(path):
      with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        if meta.get("encoder") == self.encoder_name:
          keys = json.loads(str(z["keys"]))
          self._emb = np.asarray(z["emb"], np.float32)
          self._rows = {(p, t): i for i, (p, t) in enumerate(keys)}

  def __getattr__(self, name):  # tokenizer, prompts, dim, encode_chunks, ... of the encoder
    if name == "encoder":
      raise AttributeError(name)
    return getattr(self.encoder, name)

  def __len__(self) -> int:
    return len(self._rows)

  def _prompt(self, prompt_name: Optional[str]) -> str:
    return self.encoder.prompts.get(prompt_name, "") if prompt_name else ""

  def encode(self, texts: Sequence[str], *, prompt_name: Optional[str] = None,
             normalize: bool = True, batch_size: int = 64, progress: Optional[bool] = None,
             **kwargs):
    """`[N, D]` float32 embeddings of `texts` (the wrapped encoder's `encode`)."""
    texts = list(texts)
    if not normalize or kwargs:
      return self.encoder.encode(texts, prompt_name=prompt_name, normalize=normalize,
                                 batch_size=batch_size, progress=progress, **kwargs)
    prompt = self._prompt(prompt_name)
    missing = list(dict.fromkeys(t for t in texts if (prompt, t) not in self._rows))
    if missing:
      new = np.asarray(self.encoder.encode(missing, prompt_name=prompt_name, normalize=True,
                                           batch_size=batch_size, progress=progress), np.float32)
      start = len(self._emb)
      self._emb = np.concatenate([self._emb, new])
      for i, t in enumerate(missing):
        self._rows[(prompt, t)] = start + i
      self._dirty = True
    return self._emb[[self._rows[(prompt, t)] for t in texts]]

  def save(self) -> None:
    """Writes the cache to `path` (atomically) when something was added."""
    if self.path is None or not self._dirty:
      return
    os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
    keys = [None] * len(self._rows)
    for k, i in self._rows.items():
      keys[i] = list(k)
    atomic_savez(self.path, emb=self._emb, keys=json.dumps(keys, ensure_ascii=False),
                 meta=json.dumps({"encoder": self.encoder_name}))
    self._dirty = False

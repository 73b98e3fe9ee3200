"""What the adapter tests share: the tiny and the real encoder, a spy on `encode`, and
candidates from the bundled HotpotQA document."""

import os

# Haystack sends usage telemetry by default; tests stay offline.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import numpy as np
import pytest

import jaxsel
from jaxsel.cli import DEMO_DOCUMENT

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def _words(text: str) -> int:
  """A tokenizer as a framework hands one over: `text -> int`."""
  return len(text.split())


class EncodeSpy:
  """Wraps an encoder's `encode`, recording every text it is asked to embed."""

  def __init__(self, encoder):
    self.inner = encoder.encode
    self.texts = []

  def __call__(self, texts, **kwargs):
    self.texts += list(texts)
    return self.inner(texts, **kwargs)


@pytest.fixture(scope="session")
def tiny():
  return jaxsel.testing.tiny_encoder()


@pytest.fixture(scope="session")
def minilm():
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  return jaxsel.load_encoder(MINILM)


@pytest.fixture
def spy(monkeypatch):
  """`spy(encoder)` -> an `EncodeSpy` installed on that encoder for this test only."""
  def install(encoder):
    s = EncodeSpy(encoder)
    monkeypatch.setattr(encoder, "encode", s)
    return s
  return install


@pytest.fixture(scope="session")
def texts():
  """The first twelve sentences of the bundled document (headings included), in reading order."""
  return [p.text for p in jaxsel.split_documents([DEMO_DOCUMENT.read_text("utf-8")],
                                                 unit="sentence")[:12]]


def _reference(encoder, query, texts, costs, *, method=None, budget=None, k=None,
              embeddings=None, query_embedding=None):
  """`Pipeline.select` on the same candidates, with a fresh pipeline (no shared cache)."""
  passages = [jaxsel.Passage(t, 0, len(t), doc=i, tokens=int(c))
              for i, (t, c) in enumerate(zip(texts, costs))]
  q = None if query_embedding is None else np.asarray(query_embedding, np.float32)[None]
  return jaxsel.Pipeline(encoder, method=method).select(
      query, passages, budget=budget, k=k, embeddings=embeddings, query_embeddings=q)


@pytest.fixture
def reference():
  return _reference


@pytest.fixture
def words():
  return _words

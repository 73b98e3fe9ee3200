"""Test doubles, kept in one place so that `tests/contracts/` can hold each one to the same
contract as the real class it stands in for."""

import re
import zlib

import jax.numpy as jnp
import numpy as np


class HashEncoder:
  """A `jaxsel.Encoder` without a model: a bag of hashed, lower-cased words (deterministic
  across processes), L2-normalised; the prompt named by `prompt_name` is prefixed to each text,
  as a real encoder does."""
  tokenizer = None

  def __init__(self, dim: int = 64, prompts=None):
    self.dim = dim
    self.prompts = {"query": "", "passage": "", **(prompts or {})}

  def encode(self, texts, *, prompt_name=None, normalize=True, batch_size=32, progress=None):
    prefix = self.prompts[prompt_name] if prompt_name is not None else ""
    out = np.zeros((len(texts), self.dim), np.float32)
    for i, t in enumerate(texts):
      for w in re.findall(r"\w+", (prefix + t).lower()):
        out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
      out[i, 0] += 1e-3  # never an all-zero row
    if normalize:
      out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


class EchoGenerator:
  """A `jaxsel.Generator` without a model: answers with the prompt's last context line."""
  name = "echo"

  def __init__(self):
    self.prompts = []

  def generate(self, prompts, *, max_new_tokens=64):
    self.prompts += list(prompts)
    return [p.split("Question:")[0].strip().splitlines()[-1][:max_new_tokens].strip() for p in prompts]


class OpaqueScorer:
  """A `jaxsel.Scorer` that hides its inner scorer's `append_gains` (the search then scores
  every child in full)."""

  def __init__(self, inner):
    self.inner = inner

  def __call__(self, order):
    return self.inner(order)


def sum_scorer(order):
  """A plain function as a scorer: the sum of the chunk ids plus one per chunk."""
  used = order >= 0
  return jnp.sum(jnp.where(used, order + 1, 0)).astype(jnp.float32)

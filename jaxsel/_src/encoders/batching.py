"""Batching for the encoders: length buckets, packing of real tokens, compiled entry points
that take per-program compiler options, and progress bars.

Shape legend: N texts, B batch rows, L tokens.

A corpus is sorted by length and each batch padded to one of a few bucket lengths (16, 32,
48, 64, 80, ... up to `max_length`), a partial batch to a power-of-two row count, so a corpus
compiles a handful of shapes; inside a batch the dense layers run on its real tokens only
(`packed_tokens`).
"""

from __future__ import annotations

import functools
import os
from typing import Iterator, Optional, Sequence

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxsel._src import checks

MIN_BUCKET = 16


# XLA:CPU (jaxlib 0.10) runs dots and reductions through YNNPACK by default; its own (Eigen)
# dots run BERT's matmuls 5-15% faster (MiniLM, [32, L] batches, 2 x86 cores), so the
# encoders compile with YNNPACK for reductions only. Per-program compiler options, not
# XLA_FLAGS: nothing changes for the rest of the process.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}


@functools.cache
def compiler_options() -> dict:
  """`CPU_COMPILER_OPTIONS` on the CPU backend, less any option named in `XLA_FLAGS` (the
  user's setting wins); `{}` elsewhere or where this jaxlib rejects them."""
  if jax.default_backend() != "cpu":
    return {}
  flags = os.environ.get("XLA_FLAGS", "")
  options = {k: v for k, v in CPU_COMPILER_OPTIONS.items() if k not in flags}
  try:
    jax.jit(lambda x: x @ x, compiler_options=options).lower(np.ones((2, 2), np.float32)).compile()
  except Exception:  # a jaxlib without these options: compile as XLA decides
    return {}
  return options


class LazyJit:
  """`jax.jit(fun, static_argnames=...)` with `compiler_options()`, built at the first call
  (so importing jaxsel neither starts JAX's backend nor fixes its options)."""

  def __init__(self, fun, static_argnames: tuple[str, ...]):
    self.fun, self.static_argnames = fun, static_argnames
    functools.update_wrapper(self, fun)

  @functools.cached_property
  def jitted(self):
    return jax.jit(self.fun, static_argnames=self.static_argnames,
                   compiler_options=compiler_options())

  @functools.cached_property
  def nested(self):  # inside a user's jit, whose options apply (jax refuses nested ones)
    return jax.jit(self.fun, static_argnames=self.static_argnames)

  def __call__(self, *args, **kwargs):
    return (self.nested if checks.any_traced((args, kwargs)) else self.jitted)(*args, **kwargs)


def jit_encoder(*static_argnames: str):
  """Decorator: a `LazyJit` of the function."""
  return lambda fun: LazyJit(fun, static_argnames)


def bucket_lengths(max_length: int) -> tuple[int, ...]:
  """Padded lengths: four per octave (16, 32, 48, 64, 80, ..., 128, 160, ...) and
  `max_length`, so padding adds at most ~25% (~8% on a real corpus) and a corpus with texts
  up to 256 tokens compiles at most 12 lengths."""
  out, b = [], MIN_BUCKET
  while b < max_length:
    out.append(b)
    b += max(MIN_BUCKET, (1 << (b.bit_length() - 1)) // 4)
  return tuple(out) + (max_length,)


def bucket(n: int, buckets: Sequence[int]) -> int:
  for b in buckets:
    if b >= n:
      return b
  return buckets[-1]


def batch_rows(n: int, batch_size: int) -> int:
  return min(batch_size, 1 << max(n - 1, 0).bit_length())


def bucketed_batches(ids: list[list[int]], type_ids: Optional[list[list[int]]], *,
                     batch_size: int, max_length: int, pad_id: int) -> Iterator[tuple]:
  """Yields `(indices, input_ids [B, Lb], attention_mask [B, Lb], token_type_ids [B, Lb])`.

  Sequences are sorted longest first; each batch is padded to a bucket length and a
  partial batch to a power-of-two row count (`indices` holds -1 on padding rows).
  """
  order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
  buckets = bucket_lengths(max_length)
  for start in range(0, len(order), batch_size):
    chunk = order[start:start + batch_size]
    rows, length = batch_rows(len(chunk), batch_size), bucket(len(ids[chunk[0]]), buckets)
    input_ids = np.full((rows, length), pad_id, np.int32)
    mask = np.zeros((rows, length), np.int32)
    tt = np.zeros((rows, length), np.int32)
    index = np.full((rows,), -1, np.int64)
    for r, i in enumerate(chunk):
      n = len(ids[i])
      input_ids[r, :n] = ids[i]
      mask[r, :n] = 1
      if type_ids is not None:
        tt[r, :n] = type_ids[i]
      index[r] = i
    yield index, input_ids, mask, tt


# Packed sizes are multiples of 1/16 of the batch. Since attention reads packed rows natively
# (csrc/attention.cc), 1/16 measured 4-8% more sentences/s than 1/8 on the 512-paragraph
# encoder benchmark (1.03-1.07 against 0.99 of PyTorch's rate) for 3 s more compile time.
PACK_STEPS = 16
PACK_MIN = 1024  # smaller batches run padded: their compute costs less than more compiles


def packed_tokens(n_real: int, rows: int, length: int) -> Optional[int]:
  """How many rows the dense layers of a `[rows, length]` batch with `n_real` real tokens run
  on: `n_real` rounded up to a sixteenth of the batch, so that packing saves at least 1/16
  of the work where it applies and a bucket compiles at most a few sizes; None (run padded)
  where it would save nothing or the batch is under `PACK_MIN` positions."""
  size = rows * length
  step = size // PACK_STEPS
  tokens = -(-n_real // step) * step if size >= PACK_MIN else size
  return tokens if tokens < size else None


def check_batch_size(batch_size) -> int:
  return checks.integer(batch_size, "batch_size")


def progress_bar(total: int, show: Optional[bool], desc: str):
  """A tqdm bar over batches: shown when `show`, or (None) when there are over 8 batches."""
  return tqdm(total=total, desc=desc, disable=not (show if show is not None else total > 8),
              unit="batch")

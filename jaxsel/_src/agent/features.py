"""What the configuration agent reads at inference: the features of a request.

Shape legend: Q queries, D embedding dimension.
"""

from __future__ import annotations

import numpy as np


def query_input(query_embeddings) -> np.ndarray:
  """The agent's input for a request: the mean of its query embeddings `[Q, D]` -> `[D]`
  (one query: its embedding)."""
  return np.mean(np.asarray(query_embeddings, np.float32), axis=0)

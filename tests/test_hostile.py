"""Work that cannot fit is refused before it starts: a `ValueError` naming the argument, the
size it would need and the fix, raised before anything is allocated or compiled (each call here
returns within a second, where the work itself would need terabytes)."""

import math
import time

import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
from jaxsel._src import checks
from jaxsel._src.scorers import basic as scorers

FREE = 16 << 30  # what these tests say the device can still allocate


@pytest.fixture(autouse=True)
def sixteen_gib_free(monkeypatch):
  monkeypatch.setattr(checks, "available_bytes", lambda: FREE)


def _refused_fast(call, match):
  start = time.monotonic()
  with pytest.raises(ValueError, match=match):
    call()
  assert time.monotonic() - start < 1.5


def test_exhaustive_search_over_too_many_orders():
  n = 200  # 200·199·198·197·196 ≈ 3e11 orders of 5
  orders = sum(math.perm(n, k) for k in range(1, 6))
  sc = scorers.relevance_scorer(jnp.ones(n))
  _refused_fast(lambda: jaxsel.exhaustive_search(sc, jnp.ones(n), budget=5.0, max_size=5),
                rf"`max_size`=5 needs about [\d.]+ TiB for the {orders:,} ordered combinations "
                r"of N=200 .*only 16.0 GiB is free; lower `max_size`, or use "
                r"`jaxsel.corag_search`")
  # What fits still runs.
  res = jaxsel.exhaustive_search(scorers.relevance_scorer(jnp.arange(6.0)), jnp.ones(6),
                                 budget=2.0, max_size=2)
  assert sorted(np.asarray(res.order).tolist()) == [4, 5]


@pytest.mark.parametrize("iterations,match", [
    (2 * 10**7, r"`iterations`=20,000,000 makes a tree of 4,000,000,001 nodes, more than int32 "
            r"node ids can number"),
    (10**7, r"`iterations`=10,000,000 needs about [\d.]+ GiB for a tree of 2,000,000,001 nodes, but "
            r"only 16.0 GiB is free; lower `iterations`"),
])
def test_corag_search_with_absurd_iterations(iterations, match):
  n = 200
  sc = scorers.relevance_scorer(jnp.ones(n))
  _refused_fast(lambda: jaxsel.corag_search(sc, jnp.ones(n), budget=5.0, iterations=iterations),
                match)


def test_knn_graph_with_too_many_neighbours():
  emb = np.broadcast_to(np.eye(4, dtype=np.float32)[0], (400_000, 4))  # a view: 16 bytes
  _refused_fast(lambda: jaxsel.knn_graph(emb, m=400_000),
                r"`m`=400,000 needs about [\d.]+ TiB for a graph of N=400,000 × m neighbours, "
                r"but only 16.0 GiB is free; lower `m`")


def test_matrix_free_block_too_large():
  emb = np.broadcast_to(np.eye(4, dtype=np.float32)[0], (200_000, 4))
  for build in (jaxsel.facility_location_from_embeddings,
                lambda e, **kw: jaxsel.saturated_coverage_from_embeddings(e, np.ones(200_000), **kw)):
    _refused_fast(lambda: build(emb, block=200_000),
                  r"`block`=200,000 needs about [\d.]+ GiB for the similarity rows of one block "
                  r"\(`\[block, Q, N\]`, N=200,000\), but only 16.0 GiB is free; lower `block`")
  assert build(emb, block=256).block == 256  # the default fits

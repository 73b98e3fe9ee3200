"""Work that cannot fit is refused before it starts: a `ValueError` naming the argument, the
size it would need and the fix, raised before anything of the work's size is allocated or
compiled (on the way to each refusal here only scalar checks of the arguments may compile, where
the work itself would need terabytes)."""

import contextlib
import logging
import math
import re

import jax
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


class _CompiledShapes(logging.Handler):
  """The operand shapes of the programs XLA compiles while active (from `jax.log_compiles`)."""

  def __init__(self):
    super().__init__()
    self.shapes = []

  def emit(self, record):
    message = record.getMessage()
    if message.startswith("Compiling "):
      self.shapes += [tuple(int(d) for d in dims.split(",") if d)
                      for dims in re.findall(r"\w+\[([\d,]*)\]", message)]

  @contextlib.contextmanager
  def listening(self):
    logger = logging.getLogger("jax._src.interpreters.pxla")
    logger.addHandler(self)
    try:
      with jax.log_compiles(True):
        yield self
    finally:
      logger.removeHandler(self)


def _refused_fast(call, match):
  with _CompiledShapes().listening() as compiled, pytest.raises(ValueError, match=match):
    call()
  # Refused from the shapes: nothing the size of the inputs was compiled on the way.
  assert all(math.prod(shape) < 100 for shape in compiled.shapes), compiled.shapes


def test_exhaustive_search_over_too_many_orders():
  n = 200  # 200·199·198·197·196 ≈ 3e11 orders of 5
  orders = sum(math.perm(n, k) for k in range(1, 6))
  sc = scorers.relevance_scorer(jnp.ones(n))
  _refused_fast(lambda: jaxsel.contrib.exhaustive_search(sc, jnp.ones(n), budget=5.0, max_size=5),
                rf"`max_size`=5 needs about [\d.]+ TiB for the {orders:,} ordered combinations "
                r"of N=200 .*only 16.0 GiB is free; lower `max_size`, or use "
                r"`jaxsel.corag_search`")
  # What fits still runs.
  res = jaxsel.contrib.exhaustive_search(scorers.relevance_scorer(jnp.arange(6.0)), jnp.ones(6),
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


# -- smaller hostile inputs: one clear error each ------------------------------------------------


@pytest.fixture
def hop_weights(monkeypatch, tmp_path):
  """Points the shipped hop-scorer weights at `tmp_path / "w.safetensors"` (uncached)."""
  from jaxsel._src.scorers import hops
  path = tmp_path / "w.safetensors"
  monkeypatch.setattr(hops, "WEIGHTS", str(path))
  hops.load_hop_params.cache_clear()
  yield hops, path
  hops.load_hop_params.cache_clear()


def test_missing_or_unreadable_hop_weights_name_the_file_when_the_pipeline_is_built(hop_weights,
                                                                                   monkeypatch):
  from jaxsel.testing import tiny_encoder
  hops, path = hop_weights
  enc = tiny_encoder()
  for make, why in ((lambda: None, "there is no such file"), (path.mkdir, "it is a folder")):
    make()
    with pytest.raises(ValueError, match=rf"hop-scorer weights at {path}: {why}; reinstall"):
      jaxsel.Pipeline(enc, method="corag")
  path.rmdir()
  path.write_bytes(b"x")
  def failing_disk(*args, **kwargs):
    raise OSError(5, "Input/output error")
  monkeypatch.setattr(hops, "open", failing_disk, raising=False)
  with pytest.raises(ValueError, match=rf"weights at {path}: Input/output error; reinstall"):
    jaxsel.Pipeline(enc)  # no method: a question gets CORAG with the learned scorer
  jaxsel.Pipeline(enc, method="coverage")  # methods that do not read them still build


class _Words:
  """A generator counting a prompt in words (what `answer` needs of one)."""
  name = "words"

  def prompt_tokens(self, prompt):
    return len(prompt.split())

  def generate(self, prompts, *, max_new_tokens):
    return ["an answer"] * len(prompts)


def test_answer_arguments_and_a_window_too_small_are_clear_errors():
  from jaxsel._src.pipeline import reader
  from jaxsel._src.pipeline.result import DEFAULT_TEMPLATE, fill_template
  from jaxsel.testing import tiny_encoder
  pipe = jaxsel.Pipeline(tiny_encoder(), method="coverage", generator=_Words())
  docs = ["Alice wrote the book. Bob read it twice."]
  for kwargs, match in (({"max_new_tokens": -100}, r"`max_new_tokens` must be at least 1"),
                        ({"max_new_tokens": 0}, r"`max_new_tokens` must be at least 1"),
                        ({"budget": "256"}, r"`budget` must be a finite number of tokens")):
    with pytest.raises(ValueError, match=match):
      pipe.answer("Who wrote it?", docs, **kwargs)
  bare = _Words().prompt_tokens(fill_template(DEFAULT_TEMPLATE, ["Who wrote it?"], ""))
  window = bare + 8 + 1  # the answer's 8 tokens and one more: no passage fits
  with pytest.raises(ValueError, match=rf"context_window of {window} is too small for the "
                     r"question, the template and the answer"):
    reader.window_room(_Words(), "Who wrote it?", DEFAULT_TEMPLATE, context_window=window,
                       max_new_tokens=8)
  with pytest.raises(ValueError, match="too small for the question, the template and the answer"):
    pipe.answer("Who wrote it?", docs, context_window=window, max_new_tokens=8)


def test_a_token_count_no_text_has_is_a_clear_error():
  counter = jaxsel.token_counter(lambda texts: [10**30 for _ in texts])
  with pytest.raises(ValueError, match=r"returned 1,0[\d,]+ tokens for one text, more than any "
                     "text holds"):
    counter.count(["a"])


@pytest.mark.parametrize("unit", ["sentence", "passage", "word"])
def test_a_byte_order_mark_is_not_text(unit):
  text = "Alice wrote the book. Bob read it twice.\n\nCarol reviewed it."
  plain = jaxsel.split_text(text, unit=unit)
  marked = jaxsel.split_text("\ufeff" + text, unit=unit)
  assert [p.text for p in marked] == [p.text for p in plain]
  assert [(p.start, p.end) for p in marked] == [(p.start + 1, p.end + 1) for p in plain]
  inner = jaxsel.split_text("Alice \ufeffwrote it.", unit=unit)  # elsewhere: left alone
  assert "\ufeff" in "".join(p.text for p in inner)

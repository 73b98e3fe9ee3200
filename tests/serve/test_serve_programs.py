"""A long-running server keeps a bounded number of compiled programs (`max_programs`): each
holds hundreds of memory mappings on XLA:CPU, and a process past Linux's 65,530 aborts inside
the compiler. Requests of ever new shapes make it free them; its answers stay the same."""

import pathlib

import httpx
import pytest

import jaxsel
from jaxsel import serve

WORDS = "cats dogs birds fish cows horses goats bees owls frogs mice deer".split()


def docs(n):
  return [f"The {WORDS[i % 12]} of farm {i} live here. They eat grass. They sleep at night."
          for i in range(n)]


def maps():
  """Memory mappings of this process (the server runs on one of its threads)."""
  path = pathlib.Path("/proc/self/maps")
  return len(path.read_text().splitlines()) if path.exists() else None


def post(url, body):
  r = httpx.post(url + "/v1/rerank", json=body, timeout=300)
  assert r.status_code == 200, r.text
  return r.json()


def soak(url, sizes):
  """Each size as a ranking and as a default selection (budget, no method): new shapes."""
  out = []
  for n in sizes:
    for budget in (None, 40):
      body = {"query": "Where do the owls sleep?", "documents": docs(n)}
      if budget is not None:
        body["budget_tokens"] = budget
      out.append([(x["index"], x.get("start"), x["relevance_score"])
                  for x in post(url, body)["results"]])
  return out


@pytest.fixture(scope="module")
def engine_url():
  app = serve.create_app(jaxsel.Pipeline(jaxsel.testing.tiny_encoder()), max_batch=2,
                         warm_up=False, max_programs=12)
  with serve.background(app) as base:
    yield app.state.engine, base


def test_new_shapes_free_the_programs_and_answers_stay_the_same(engine_url):
  engine, url = engine_url
  first = soak(url, [1, 3])
  assert engine.programs.frees >= 1  # 4 requests of new shapes load ~45 programs
  peak = maps()
  frees = engine.programs.frees
  # More new shapes: freed again, and the mappings do not pile up (without the bound these
  # ~45 programs add ~1,700 mappings here, ~12,000 with all-MiniLM-L6-v2).
  soak(url, [8, 21])
  assert engine.programs.frees > frees
  assert engine.programs.held < engine.programs.limit
  if peak is not None:
    assert maps() < peak + 800
  assert soak(url, [1, 3]) == first  # compiled again after the frees: the same answers
  text = httpx.get(url + "/metrics").text
  assert f"jaxsel_serve_compiled_program_frees {float(engine.programs.frees)}" in text
  assert "jaxsel_serve_compiled_programs " in text


def test_a_bad_max_programs_is_refused_before_any_compile():
  with pytest.raises(ValueError, match="max_programs"):
    serve.create_app(jaxsel.Pipeline(jaxsel.testing.tiny_encoder()), max_programs=0,
                     warm_up=False)

"""The Pipeline reports greedy's certificate (`SelectionResult.bound` / `.certified`, in
`table()` and `to_dict()`), equal to `jaxsel.greedy` on the same objective and never below the
optimum over every selection within the budget; CORAG reports whether its search was
exhaustive, its answer's value and its optimistic estimate."""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import jaxsel
from jaxsel._src import text
from jaxsel._src.pipeline.selection import Pipeline
from jaxsel.testing import tiny_bert_config, tiny_encoder

DATA = Path(__file__).resolve().parents[2] / "jaxsel" / "data"
DOC = (DATA / "hotpotqa_wiki.md").read_text("utf-8")
SMALL = DOC[:DOC.index("## Janet Waldo")]  # about a dozen passages: the brute force stays small
Q = "Which magazine was started first, Arthur's Magazine or First for Women?"
BUDGET = 120


@pytest.fixture(scope="module")
def enc():
  return tiny_encoder(tiny_bert_config(max_position_embeddings=256, hidden_size=32), seed=0)


def _optimum(obj, costs, budget):
  """The best value of any subset within the budget (exhaustive)."""
  n, best = len(costs), 0.0
  for size in range(1, n + 1):
    for combo in itertools.combinations(range(n), size):
      if costs[list(combo)].sum() <= budget:
        best = max(best, float(obj.value(np.isin(np.arange(n), combo))))
  return best


def test_greedy_certificate_through_the_pipeline(enc):
  pipe = Pipeline(enc, method="facility_location", unit="passage", max_tokens=80)
  res = pipe.select([Q], [SMALL], budget=BUDGET)
  passages = text.split_documents([SMALL], tokenizer=enc.tokenizer, unit="passage", max_tokens=80)
  assert res.candidates == passages and len(passages) <= 14
  e = enc.encode([p.text for p in passages], prompt_name="passage")
  r = jaxsel.cosine_similarity(enc.encode([Q], prompt_name="query"), e)
  obj = jaxsel.facility_location(jaxsel.cosine_similarity(e), r)
  costs = np.array([p.tokens for p in passages], np.float32)
  sel = jaxsel.greedy(obj, k=len(passages), costs=costs, budget=float(BUDGET))
  # Lazy greedy's stale gains (in the top-k part of the bound) depend on which candidates it
  # re-evaluated when, which the rounding of the similarities made inside the program can change.
  assert res.bound == pytest.approx(float(sel.bound), rel=1e-3)
  assert res.certified == pytest.approx(float(sel.certified), rel=1e-3)
  assert res.certified == pytest.approx(res.curve[-1] / res.bound, rel=1e-5) and res.certified <= 1
  assert res.bound >= _optimum(obj, costs, BUDGET) * (1 - 1e-5)
  line = f"certified \u2265 {int(100 * res.certified)}% of optimal"
  assert line in res.table() and res.certificate.startswith(line)
  d = json.loads(json.dumps(res.to_dict()))
  assert d["bound"] == pytest.approx(res.bound) and d["certified"] == pytest.approx(res.certified)
  many = pipe.select_many([([Q], [SMALL]), (["Who is Shirley Temple?"], [SMALL])], budget=BUDGET)
  assert many[0].bound == pytest.approx(res.bound, rel=1e-5)
  assert many[0].certified == pytest.approx(res.certified, rel=1e-5)


def test_corag_and_baselines_say_what_they_know(enc):
  res = Pipeline(enc, method="corag", unit="passage", max_tokens=80).select([Q], [SMALL], budget=BUDGET)
  assert res.bound is None and res.certified is None and isinstance(res.exhausted, bool)
  assert res.estimate >= res.searched
  assert ("exact" if res.exhausted else "search not exhaustive") in res.table()
  d = res.to_dict()
  assert d["exhausted"] == res.exhausted and d["estimate"] == pytest.approx(res.estimate)
  res = Pipeline(enc, method="naive", unit="passage", max_tokens=80).select([Q], [SMALL], budget=BUDGET)
  assert res.bound is None and res.exhausted is None and res.certificate == ""

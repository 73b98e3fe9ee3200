"""The evaluation recipe end to end on a slice (the first 12 HotpotQA test questions, the real
all-MiniLM-L6-v2): the default CORAG beats NaiveRAG at 256 tokens; a rerun reads everything
from the cache; the batched solve of the sweeps picks what `Pipeline.select` picks; metrics,
oracles, the cross-dataset choice and the agent's labels against hand-computed values."""

import json
import os

import numpy as np
import pytest

from doubles import HashEncoder

import jaxsel
from training import agent_eval, context_eval, crossval, qa, qa_sets
from training.embedding_cache import CachedEncoder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "tests", "data", "hotpotqa_sample.jsonl")
HOTPOT_DEV = os.path.join(qa_sets.DATA_ROOT, qa_sets.HOTPOT_DEV)


def _script():
  import importlib.util
  spec = importlib.util.spec_from_file_location("_jaxsel_training_evaluate",
                                                os.path.join(ROOT, "training", "evaluate.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


class Counting:
  """An encoder that counts the texts it embeds."""

  def __init__(self, inner):
    self.inner, self.texts = inner, 0

  def __getattr__(self, name):
    return getattr(self.inner, name)

  def encode(self, texts, **kw):
    self.texts += len(texts)
    return self.inner.encode(texts, **kw)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(HOTPOT_DEV), reason="the shared HotpotQA data is not here")
def test_recipe_on_a_slice_default_beats_naive(tmp_path):
  enc = Counting(jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2"))
  readme = tmp_path / "README.md"
  readme.write_text("# Benchmarks\n\n## Evaluation\n\nOLD SECTION\n\n## Other\n\nkept\n")
  argv = ["--parts", "tables", "--sets", "hotpot_test", "--limit", "12", "--methods", "naive,default",
          "--cache", str(tmp_path / "eval"), "--out", str(tmp_path / "report.json"),
          "--readme", str(readme), "--resamples", "500", "--no-progress"]
  evaluate = _script()
  assert evaluate.main(argv, encoder=enc) == 0
  res = json.loads((tmp_path / "report.json").read_text())["tables"]["hotpot_test"]
  assert res["n"] == 12
  naive, default = res["256"]["naive"], res["256"]["default"]
  # Measured on this slice: NaiveRAG 41.7, the default 75.0 (+33.3, 4 of 12 questions); the
  # margin leaves room for two questions to flip.
  assert default["joint"] >= naive["joint"] + 16.0
  assert default["joint_diff"]["low"] <= default["joint_diff"]["mean"] <= default["joint_diff"]["high"]
  for b in ("128", "256", "384"):
    r = res[b]
    assert r["naive"]["tokens"] <= int(b) and r["default"]["tokens"] <= int(b)
    assert r["oracle_piece"]["joint"] >= r["oracle_paragraph"]["joint"]
    assert r["default"]["strict"] <= r["default"]["joint"]
  text = readme.read_text()
  assert text.count("## Evaluation") == 1 and "OLD SECTION" not in text and "## Other\n\nkept" in text
  assert "**CORAG default (bridge + top-up)**" in text and "python -m training evaluate --parts" in text
  first = enc.texts
  assert first > 12
  # A rerun embeds nothing and selects nothing: the same report from the cache.
  assert evaluate.main(argv, encoder=enc) == 0
  assert enc.texts == first
  again = json.loads((tmp_path / "report.json").read_text())["tables"]["hotpot_test"]
  assert again["256"]["default"]["joint"] == default["joint"]


@pytest.fixture(scope="module")
def prepared():
  ex = qa.load_qa_jsonl(SAMPLE)[:4]
  pipe = jaxsel.Pipeline(CachedEncoder(HashEncoder()), cache_size=32, max_tokens=64)
  return pipe, context_eval.prepare(pipe, ex)


def test_batched_solve_picks_what_select_picks(prepared):
  pipe, prep = prepared
  assert max(len(p.passages) for p in prep) > len(prep[0].example.passages)  # pieces, buckets
  weights = crossval.bridge_builder(mention=1.0, link=0.5)
  assert crossval.bridge_builder(mention=1.0, link=0.5) is weights  # one static object
  assert crossval.bridge_builder(mention=1.5) == "bridge"
  for p in (pipe.replace(method="corag"), pipe.replace(method="corag", corag_scorer=weights)):
    picks = context_eval.batched_select(p, prep, budget=150)
    for q, pk in zip(prep, picks):
      res = p.select(q.example.question, q.passages, budget=150)  # the same candidates: given
      # Passages cost their own tokens, split documents cost as sent (with their numbering)
      assert pk == context_eval.pieces_of(res.passages)


def test_question_metrics_and_oracles():
  ex = qa.QAExample("q", "Who?", ("A", "B", "C"), ("a", "b", "c"), (True, False, True), ("cc",))
  pieces = [[0, 0, 4, 10], [0, 4, 8, 30], [1, 0, 4, 5], [2, 0, 4, 20]]
  m = context_eval.question_metrics(ex, [[0, 4, 8, 30], [2, 0, 4, 20]], pieces)
  assert m["joint"] == 1.0 and m["strict"] == 0.0 and m["recall"] == 1.0 and m["tokens"] == 50.0
  m = context_eval.question_metrics(ex, [[0, 0, 4, 10], [0, 4, 8, 30], [2, 0, 4, 20]], pieces)
  assert m["strict"] == 1.0
  m = context_eval.question_metrics(ex, [[1, 0, 4, 5]], pieces)
  assert m["joint"] == 0.0 and m["recall"] == 0.0 and m["aic"] == 0.0
  # Paragraph oracle: gold paragraphs of 40 and 20 tokens; piece oracle: 10 and 20.
  assert context_eval.oracle_joint(ex, pieces, 59, level="paragraph") == 0.0
  assert context_eval.oracle_joint(ex, pieces, 60, level="paragraph") == 1.0
  assert context_eval.oracle_joint(ex, pieces, 30, level="piece") == 1.0
  assert context_eval.oracle_joint(ex, pieces, 29, level="piece") == 0.0


def test_stored_runs_are_dropped_when_settings_or_the_library_change(tmp_path, monkeypatch):
  """A stored run is reused only with the same settings and the same jaxsel source: an
  evaluation after a code change must not read the picks the old code made."""
  src = tmp_path / "pkg"
  (src / "sub").mkdir(parents=True)
  (src / "a.py").write_text("x = 1\n")
  (src / "sub" / "k.cc").write_text("int f();\n")
  h0 = context_eval.source_hash(str(src))
  (src / "notes.txt").write_text("not code")
  assert context_eval.source_hash(str(src)) == h0
  (src / "sub" / "k.cc").write_text("int g();\n")
  h1 = context_eval.source_hash(str(src))
  (src / "a.py").write_text("x = 2\n")
  assert len({h0, h1, context_eval.source_hash(str(src))}) == 3

  path = str(tmp_path / "runs.json")
  monkeypatch.setattr(context_eval, "code_fingerprint", lambda: "v1")
  store = context_eval.RunStore(path)
  store.method("m", {"iterations": 15}).setdefault("256", {})["q1"] = {"picks": [], "ms": 1.0}
  store.save()
  assert "q1" in context_eval.RunStore(path).method("m", {"iterations": 15})["256"]
  assert context_eval.RunStore(path).method("m", {"iterations": 30}) == {}
  monkeypatch.setattr(context_eval, "code_fingerprint", lambda: "v2")
  assert context_eval.RunStore(path).method("m", {"iterations": 15}) == {}


def test_embedding_cache_round_trip(tmp_path):
  path = str(tmp_path / "e.npz")
  enc = Counting(HashEncoder())
  c = CachedEncoder(enc, path)
  a = c.encode(["x y", "z", "x y"], prompt_name="passage")
  assert enc.texts == 2 and a.shape == (3, 64)
  c.save()
  d = CachedEncoder(enc, path)
  np.testing.assert_array_equal(d.encode(["z", "x y"], prompt_name="query"), a[[1, 0]])
  assert enc.texts == 2 and len(d) == 2
  assert len(CachedEncoder(enc, path, name="another model")) == 0


def test_cross_dataset_choice_and_agent_labels():
  budgets = (128,)

  class Store:
    def __init__(self, runs):
      self.data = {"pieces": {}, "methods": {}}
      for name, joints in runs.items():
        self.data["methods"][name] = {"runs": {"128": {
            str(i): {"picks": [[0, 0, 1, 1]] if j else [], "ms": 1.0} for i, j in enumerate(joints)}}}
      self.data["pieces"] = {str(i): [[0, 0, 1, 1]] for i in range(len(next(iter(runs.values()))))}

  ex = [qa.QAExample(str(i), "?", ("T",), ("t",), (True,), ()) for i in range(4)]
  grid = {"default": {}, "a": {}, "b": {}}
  runs = {  # per set: naive, default, a (better on 2Wiki, worse on MuSiQue), b (better everywhere)
      "hotpot_dev_train": {"grid:naive": [0, 0, 0, 0], "grid:default": [1, 1, 0, 0], "grid:a": [1, 1, 1, 0],
                           "grid:b": [1, 1, 1, 0]},
      "hotpot_train": {"grid:naive": [0, 0, 0, 0], "grid:default": [1, 0, 0, 0], "grid:a": [1, 0, 0, 0],
                       "grid:b": [1, 1, 0, 0]},
      "musique": {"grid:naive": [1, 0, 0, 0], "grid:default": [1, 1, 0, 0], "grid:a": [0, 0, 0, 0],
                  "grid:b": [1, 1, 1, 0]},
      "2wiki": {"grid:naive": [0, 0, 0, 0], "grid:default": [1, 0, 0, 0], "grid:a": [1, 1, 1, 1],
                "grid:b": [1, 1, 0, 0]}}
  stores = {s: Store(r) for s, r in runs.items()}
  exs = {s: ex for s in runs}
  # On HotpotQA + MuSiQue "a" has a negative gain: excluded; "b" is best.
  assert crossval.choose(stores, exs, ["hotpot_dev_train", "hotpot_train", "musique"], grid=grid,
                         budgets=budgets)[0] == "b"
  rows = crossval.leave_one_out(stores, exs, grid=grid, budgets=budgets, n_resamples=100)
  assert [r["held_out"] for r in rows] == ["HotpotQA", "MuSiQue", "2Wiki"]
  assert rows[2]["chosen"] == "b" and rows[2]["own_best"] == "a"
  assert rows[1]["n"] == 4 and rows[0]["n"] == 8
  # Agent labels: best 10·joint + recall over budgets; ties go to the default (index 0).
  joint = np.array([[[1, 0]], [[0, 1]], [[1, 1]]], float).transpose(0, 2, 1)  # [Q=3, K=2, B=1]
  recall = np.array([[[1, .5]], [[.5, 1]], [[1, 1]]], float).transpose(0, 2, 1)
  assert agent_eval.labels(joint, recall).tolist() == [0, 1, 0]


def test_forms_against_an_earlier_run_counts_gains_and_losses():
  from training import reports
  before = {"2wiki:untitled:256:learned_hops": np.array([1, 0, 0, 1], np.float32),
            "2wiki:untitled:256:naive": np.array([0, 0, 0, 0], np.float32)}
  now = {"2wiki:untitled:256:learned_hops": np.array([1, 1, 1, 0], np.float32),
         "musique:titled:128:naive": np.array([1.0], np.float32)}  # not in `before`: left out
  lines = reports.paired_lines(now, before)
  assert len(lines) == 3
  assert lines[2].startswith("| 2Wiki | untitled | 256 | learned_hops | 50.0 | 75.0 | +2 / -1 | +25.0 [")
  with pytest.raises(ValueError, match="same --limit"):
    reports.paired_lines({"2wiki:untitled:256:naive": np.zeros(3)}, before)


def test_a_probe_of_two_configurations_prints_their_paired_difference():
  from training import runner
  per = {"a": {256: {"sf": [1.0, 1.0, 0.0, float("nan")], "ms": [1.0] * 4}},
         "b": {256: {"sf": [0.0, 1.0, 0.0, 1.0], "ms": [2.0] * 4}}}
  lines = runner.paired_lines({"2wiki:titled": {"per_question": per}}, "a", "b")
  assert len(lines) == 1 and lines[0].startswith("2wiki:titled 256: a - b: sf +33.3 [")
  assert "ms" not in lines[0]  # timings are not a paired metric

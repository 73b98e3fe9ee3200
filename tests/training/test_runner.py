"""`training/runner.py` on real questions (2WikiMultihopQA and HotpotQA-hard, the files of
../shared/data) and the real all-MiniLM-L6-v2: a supporting fact's span in the passage text is
its sentence, in both forms; the metrics of one selection match a hand count; `run_cell` keeps
every selection within its budget with offsets in the sources (paragraphs or documents), gives
`select`'s picks batched, and resumes from its stored runs without selecting again."""

import json
import os

import numpy as np
import pytest

import jaxsel
from training import grids, hop_features, qa_sets, runner


@pytest.fixture(scope="module")
def encoder():
  return jaxsel.load_encoder(hop_features.ENCODER)


@pytest.mark.parametrize("name", ["2wiki", "hotpot_hard"])
@pytest.mark.parametrize("form", ["titled", "untitled"])
def test_supporting_spans_are_the_labelled_sentences(name, form, encoder):
  examples = hop_features.load_examples(name, limit=5)
  raw = {}
  with open(os.path.join(qa_sets.DATA_ROOT, runner.RAW[name]), encoding="utf-8") as f:
    for line in f:
      obj = json.loads(line)
      raw[str(obj["_id"])] = obj
      if len(raw) >= 5:
        break
  tok = encoder.tokenizer
  for ex, facts in zip(examples, runner.supporting_spans(name, examples, form)):
    passages = hop_features.paragraph_passages(ex, form, tok)
    context = dict((t, s) for t, s in raw[ex.id]["context"])
    labelled = [context[t][i].strip() for t, i in raw[ex.id]["supporting_facts"]
                if t in context and 0 <= i < len(context[t]) and context[t][i].strip()]
    assert len(facts) == len(labelled) > 0
    for where, sentence in zip(facts, labelled):
      for i, a, b in where:
        assert passages[i].text[a:b] == sentence


def test_question_metrics_count_whole_facts_and_paragraphs(encoder):
  ex = hop_features.load_examples("2wiki", limit=1)[0]
  tok = encoder.tokenizer
  passages = hop_features.paragraph_passages(ex, "untitled", tok)
  facts = runner.supporting_spans("2wiki", [ex], "untitled")[0]
  q = runner.Question(ex, passages, passages, facts, [])
  gold = [i for i, g in enumerate(ex.gold) if g]
  # Every supporting sentence alone, as a piece of its paragraph: sf 1, para 1, whole 0/1.
  pieces = [jaxsel.Passage(passages[i].text[a:b], a, b, doc=i, tokens=5)
            for fact in facts for i, a, b in fact[:1]]
  row = runner.span_metrics(q, pieces, "\n\n".join(p.text for p in pieces), 128)
  assert row["sf"] == 1.0 and row["para"] == float(set(gold) <= {p.doc for p in pieces})
  assert row["tokens"] == 5.0 * len(pieces)
  # One fact cut short: no longer whole, so sf 0.
  p0 = pieces[0]
  short = [jaxsel.Passage(p0.text[:-1], p0.start, p0.end - 1, doc=p0.doc, tokens=5)] + pieces[1:]
  assert runner.span_metrics(q, short, "", 128)["sf"] == 0.0


def _grid(cache, configs=("naive_s",)):
  return grids.GRANULARITY._replace(budgets=(128,), cache=str(cache)).only(configs)


QUIET = dict(log=lambda *a, **k: None)


@pytest.mark.parametrize("form", ["untitled", "split"])
def test_run_cell_selects_within_the_budget_with_offsets_in_the_sources(form, tmp_path, encoder):
  """Two questions through the Pipeline (NaiveRAG over sentences, 128 tokens): every piece
  indexes its paragraph (run_cell asserts it), nothing goes over the budget, and the metrics
  are 0/1 per question; "split" hands the paragraphs over as documents. Batched (one
  `select_many`), the picks and metrics are the same."""
  grid = _grid(tmp_path)
  res = runner.run_cell(grid, "2wiki", form, base=encoder, limit=2, store=str(tmp_path / "a"), **QUIET)
  assert res["n"] == 2 and res["over"] == 0
  row = res["per_question"]["naive_s"][128]
  assert all(v in (0.0, 1.0) for k in ("sf", "para", "whole") for v in row[k])
  assert all(0 < t <= 128 for t in row["tokens"])
  batched = runner.run_cell(grid, "2wiki", form, base=encoder, limit=2, store=str(tmp_path / "b"),
                            batched=True, **QUIET)
  assert batched["picks"] == res["picks"]
  assert {k: v for k, v in batched["per_question"]["naive_s"][128].items() if k != "ms"} == \
      {k: v for k, v in row.items() if k != "ms"}


def test_the_runner_stores_its_runs_and_resumes(tmp_path, encoder):
  """A configuration that is a selection function: its runs are stored per question; a rerun
  selects nothing again, a wider limit only the new question, and a configuration whose
  settings changed runs again; a configuration that runs on every other question has NaN
  elsewhere."""
  calls = []

  def first(enc):
    def fn(qs, budget):
      calls.extend(q.example.id for q in qs)
      return [([q.passages[0]], q.passages[0].text, {"extra": 1.0}) for q in qs]
    return fn

  grid = _grid(tmp_path)._replace(configs=(runner.Config("first", "first", select=first),
                                           runner.Config("odd", "odd", select=first, every=2)))
  kw = dict(base=encoder, store=str(tmp_path / "runs"), **QUIET)
  a = runner.run_cell(grid, "2wiki", "untitled", limit=2, **kw)
  assert len(calls) == 3 and a["per_question"]["first"][128]["extra"] == [1.0, 1.0]
  assert np.isnan(a["per_question"]["odd"][128]["para"][1]) and a["picks"]["odd"][128][1] is None
  assert runner.run_cell(grid, "2wiki", "untitled", limit=2, **kw)["picks"] == a["picks"] and len(calls) == 3
  b = runner.run_cell(grid, "2wiki", "untitled", limit=3, **kw)
  assert len(calls) == 5 and b["picks"]["first"][128][:2] == a["picks"]["first"][128]
  changed = grid._replace(settings={"widening": 2.0})
  runner.run_cell(changed, "2wiki", "untitled", limit=2, **kw)
  assert len(calls) == 8


def test_a_set_kept_outside_the_project_runs_from_its_file(tmp_path, encoder):
  """A JSONL file's path is a set: the first two 2Wiki questions copied to another folder give
  the same examples, supporting facts and selections as the built-in set; a MuSiQue-format
  file has no sentence labels; a name that is neither a set nor a file is refused, naming both."""
  src = os.path.join(qa_sets.DATA_ROOT, qa_sets.FILES["2wiki"])
  with open(src, encoding="utf-8") as f:
    lines = [next(f) for _ in range(2)]
  path = tmp_path / "outside" / "other-set.jsonl"
  path.parent.mkdir()
  path.write_text("".join(lines), encoding="utf-8")
  name = str(path)
  assert qa_sets.is_file(name) and not qa_sets.is_file("2wiki")
  assert qa_sets.label(name) == "other-set" and hop_features.label(name) == "other-set"
  assert qa_sets.cache_tag(name).startswith("other-set-") and qa_sets.cache_tag("2wiki") == "2wiki"
  assert qa_sets.cache_tag(name) != qa_sets.cache_tag(str(tmp_path / "other-set.jsonl"))
  ours, theirs = hop_features.load_examples("2wiki", limit=2), hop_features.load_examples(name)
  assert ours == theirs
  assert runner.supporting_spans(name, theirs, "untitled") == runner.supporting_spans("2wiki", ours, "untitled")
  grid, kw = _grid(tmp_path / "cache"), dict(base=encoder, limit=2, store=str(tmp_path / "runs"), **QUIET)
  a, b = runner.run_cell(grid, "2wiki", "untitled", **kw), runner.run_cell(grid, name, "untitled", **kw)
  assert a["picks"] == b["picks"]
  assert {k: v for k, v in a["per_question"]["naive_s"][128].items() if k != "ms"} == \
      {k: v for k, v in b["per_question"]["naive_s"][128].items() if k != "ms"}
  assert sorted(os.listdir(tmp_path / "cache")) == sorted(
      ["emb_2wiki_untitled.npz", f"emb_{qa_sets.cache_tag(name)}_untitled.npz"])

  musique = tmp_path / "m.jsonl"
  with open(os.path.join(qa_sets.DATA_ROOT, qa_sets.FILES["musique"]), encoding="utf-8") as f:
    musique.write_text(next(f), encoding="utf-8")
  ex = hop_features.load_examples(str(musique))
  assert len(ex) == 1 and runner.supporting_spans(str(musique), ex, "untitled") == [None]
  with pytest.raises(ValueError, match="JSONL file"):
    hop_features.load_examples("other_set")


def test_the_granularity_report_sets_the_default_against_the_better_of_each_pair():
  """`default` (no granularity named) is compared with the better of default_p / default_s and
  the better NaiveRAG, metric by metric; the tables are those of training/RESULTS.md."""
  from training import reports
  per = {m: {128: {"sf": v, "aic": v, "para": v, "whole": v}} for m, v in {
      "naive_p": [0, 0, 0, 0], "naive_s": [1, 0, 0, 0], "default_p": [1, 1, 0, 0],
      "default_s": [1, 1, 1, 0], "default": [1, 1, 1, 1]}.items()}
  row = reports.granularity_summary(per, (128,))["128"]["sf"]
  assert row["best_naive"] == "naive_s" and row["best_default"] == "default_s"
  assert row["default_vs_best"]["mean"] == 25.0 and row["default_diff"]["mean"] == 75.0
  assert row["default_s_diff"]["mean"] == 50.0
  report = {"2wiki:titled": {"n": 4, "weights": "w.safetensors",
                             "summary": reports.granularity_summary(per, (128,))}}
  lines = reports.granularity_markdown(report)
  assert lines[0] == "**supporting-fact joint** (%, 4 questions each):"
  assert "| 2Wiki (LOO) | titled | 128 | 0.0 | 25.0 | 50.0 | 75.0 | +50.0 [" in "\n".join(lines)
  assert any(line.startswith("| 2Wiki (LOO) | titled | 128 | answer in context | 100.0 | sent. 75.0 | +25.0 [")
             for line in lines)

"""`training/granularity_eval.py` on real questions (2WikiMultihopQA and HotpotQA-hard, the
files of ../shared/data) and the real all-MiniLM-L6-v2: a supporting fact's span in the passage
text is its sentence, in both forms; the metrics of one selection match a hand count; `run_set`
keeps every selection within its budget with offsets in the sources (paragraphs or documents)."""

import json
import os

import numpy as np
import pytest

import jaxsel
from training import granularity_eval as ge, hop_features, qa_sets


@pytest.fixture(scope="module")
def encoder():
  return jaxsel.load_encoder(hop_features.ENCODER)


@pytest.mark.parametrize("name", ["2wiki", "hotpot_hard"])
@pytest.mark.parametrize("form", ["titled", "untitled"])
def test_supporting_spans_are_the_labelled_sentences(name, form, encoder):
  examples = hop_features.load_examples(name, limit=5)
  raw = {}
  with open(os.path.join(qa_sets.DATA_ROOT, ge.RAW[name]), encoding="utf-8") as f:
    for line in f:
      obj = json.loads(line)
      raw[str(obj["_id"])] = obj
      if len(raw) >= 5:
        break
  tok = encoder.tokenizer
  for ex, facts in zip(examples, ge.supporting_spans(name, examples, form)):
    passages = hop_features.paragraph_passages(ex, form, tok)
    context = dict((t, s) for t, s in raw[ex.id]["context"])
    labelled = [context[t][i].strip() for t, i in raw[ex.id]["supporting_facts"]
                if t in context and 0 <= i < len(context[t]) and context[t][i].strip()]
    assert len(facts) == len(labelled) > 0
    for where, sentence in zip(facts, labelled):
      for i, a, b in where:
        assert passages[i].text[a:b] == sentence


def _result(ex, picks, candidates):
  k = len(picks)
  return jaxsel.SelectionResult(
      method="naive", queries=[ex.question], passages=picks, indices=np.arange(k),
      scores=np.zeros(k, np.float32), gains=np.zeros(k, np.float32),
      curve=np.zeros(k, np.float32), cost=sum(p.tokens for p in picks), budget=None,
      candidates=candidates)


def test_question_metrics_count_whole_facts_and_paragraphs(encoder):
  ex = hop_features.load_examples("2wiki", limit=1)[0]
  tok = encoder.tokenizer
  passages = hop_features.paragraph_passages(ex, "untitled", tok)
  facts = ge.supporting_spans("2wiki", [ex], "untitled")[0]
  gold = [i for i, g in enumerate(ex.gold) if g]
  # Every supporting sentence alone, as a piece of its paragraph: sf 1, para 1, whole 0/1.
  pieces = [jaxsel.Passage(passages[i].text[a:b], a, b, doc=i, tokens=5)
            for fact in facts for i, a, b in fact[:1]]
  res = _result(ex, pieces, passages)
  row = ge.question_metrics(ex, res, facts, passages)
  assert row["sf"] == 1.0 and row["para"] == float(set(gold) <= {p.doc for p in pieces})
  assert row["tokens"] == 5.0 * len(pieces)
  # One fact cut short: no longer whole, so sf 0.
  p0 = pieces[0]
  short = [jaxsel.Passage(p0.text[:-1], p0.start, p0.end - 1, doc=p0.doc, tokens=5)] + pieces[1:]
  res = _result(ex, short, passages)
  assert ge.question_metrics(ex, res, facts, passages)["sf"] == 0.0


@pytest.mark.parametrize("form", ["untitled", "split"])
def test_run_set_selects_within_the_budget_with_offsets_in_the_sources(form, tmp_path, encoder):
  """One question through the Pipeline (NaiveRAG over sentences, 128 tokens): every piece
  indexes its paragraph (run_set asserts it), nothing goes over the budget, and the metrics are
  0/1 per question; "split" hands the paragraphs over as documents."""
  res = ge.run_set("2wiki", form, base=encoder, cache=str(tmp_path), limit=2, budgets=(128,),
                   methods=("naive_s",), log=lambda *a, **k: None)
  assert res["n"] == 2 and res["over"] == 0
  row = res["per_question"]["naive_s"][128]
  assert all(v in (0.0, 1.0) for k in ("sf", "para", "whole") for v in row[k])
  assert all(0 < t <= 128 for t in row["tokens"])


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
  assert ge.supporting_spans(name, theirs, "untitled") == ge.supporting_spans("2wiki", ours, "untitled")
  kw = dict(base=encoder, cache=str(tmp_path / "cache"), limit=2, budgets=(128,),
            methods=("naive_s",), log=lambda *a, **k: None)
  a, b = ge.run_set("2wiki", "untitled", **kw), ge.run_set(name, "untitled", **kw)
  assert a["per_question"] == b["per_question"]
  assert sorted(os.listdir(tmp_path / "cache")) == sorted(
      ["emb_2wiki_untitled.npz", f"emb_{qa_sets.cache_tag(name)}_untitled.npz"])

  musique = tmp_path / "m.jsonl"
  with open(os.path.join(qa_sets.DATA_ROOT, qa_sets.FILES["musique"]), encoding="utf-8") as f:
    musique.write_text(next(f), encoding="utf-8")
  ex = hop_features.load_examples(str(musique))
  assert len(ex) == 1 and ge.supporting_spans(str(musique), ex, "untitled") == [None]
  with pytest.raises(ValueError, match="JSONL file"):
    hop_features.load_examples("other_set")

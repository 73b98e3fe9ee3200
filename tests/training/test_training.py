"""Label, train and evaluate scripts end to end on a tiny HotpotQA sample; metrics against
plain references; the batched search agrees with per-question calls."""

import hashlib
import json
import os
import warnings

import numpy as np
import pytest

from doubles import HashEncoder

import jaxsel
from training import evaluation
from training import files
from training import labels
from training import qa
from jaxsel._src.agent.params import load_agent
import jaxsel.files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "tests", "data", "hotpotqa_sample.jsonl")


def _script(name):
  """Imports training/<name>.py under a private module name (a plain `import evaluate` could
  pick up an unrelated installed package)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location(f"_jaxsel_training_{name}",
                                                os.path.join(ROOT, "training", f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


evaluate_script = _script("evaluate")
label_queries = _script("label_queries")
train_script = _script("train_agent")


@pytest.fixture(scope="module")
def sample():
  ex = qa.load_qa_jsonl(SAMPLE)
  return ex, qa.featurize(HashEncoder(), ex)


def test_load_and_split(sample, tmp_path):
  ex, f = sample
  assert len(ex) == 8 and all(sum(e.gold) == 2 for e in ex)
  assert f.passages.shape == (8, 10, 64) and f.valid.sum() == sum(len(e.passages) for e in ex)
  tr, ho = qa.split_by_id(ex, n_train=5, seed=0)
  assert len(tr) == 5 and len(ho) == 3 and not {e.id for e in tr} & {e.id for e in ho}
  tr2, _ = qa.split_by_id(list(reversed(ex)), n_train=5, seed=0)  # order-independent
  assert {e.id for e in tr} == {e.id for e in tr2}
  # Generic format and clear errors.
  p = tmp_path / "g.jsonl"
  p.write_text(json.dumps({"question": "q?", "passages": [{"title": "A", "text": "x"}, "y"],
                           "gold": [1], "answer": "x"}) + "\n")
  g = qa.load_qa_jsonl(str(p))[0]
  assert g.gold == (False, True) and g.answers == ("x",) and g.texts() == ["A: x", "y"]
  p.write_text("{bad\n")
  with pytest.raises(ValueError, match="not valid JSON"):
    qa.load_qa_jsonl(str(p))


def test_metrics_against_hand_computed():
  texts = ["Paris is big.", "Berlin is old.", "Rome: pasta."]
  m = evaluation.selection_metrics([0, 2, -1], texts=texts, gold=[True, True, False],
                                   costs=[3, 4, 5], answers=["Paris"])
  assert m["recall"] == 0.5 and m["joint_recall"] == 0.0 and m["answer_in_context"] == 1.0
  assert m["tokens"] == 8.0
  assert 0 < m["rouge_l"] < 1
  full = evaluation.selection_metrics([1, 0], texts=texts, gold=[True, True, False], costs=[3, 4, 5],
                                      answers=["yes"])
  assert full["joint_recall"] == 1.0 and np.isnan(full["answer_in_context"])
  assert evaluation.rouge_l("Paris is big.\n\nBerlin is old.", "Paris is big.\n\nBerlin is old.") == 1.0


def test_paired_bootstrap():
  rng = np.random.default_rng(0)
  a = rng.random(200)
  ci = evaluation.paired_bootstrap(a + 0.1, a, n_resamples=500)
  assert ci.low == pytest.approx(0.1) and ci.high == pytest.approx(0.1)  # constant difference
  b = rng.random(200)
  ci = evaluation.paired_bootstrap(a, b, n_resamples=2000, seed=1)
  assert ci.low < ci.mean < ci.high and not ci.excludes_zero()
  # Matches a plain loop over resamples.
  d = a - b
  r = np.random.default_rng(1)
  means = [d[r.integers(0, 200, 200)].mean() for _ in range(2000)]
  assert ci.low == pytest.approx(np.percentile(means, 2.5))
  with pytest.raises(ValueError, match="same questions"):
    evaluation.paired_bootstrap(a, b[:3])


def test_batched_search_matches_single_and_budget(sample):
  from jaxsel._src.search import corag_search
  ex, f = sample
  orders = labels.search_orders(f, "mentions_links", budget=200, iterations=5, cost_penalty=0.2,
                                exploration=2.0, max_depth=4)
  for i in (0, 5):
    fi = qa.QAFeatures(*(a[i] for a in f))
    single = corag_search(labels.build_scorer("mentions_links", fi), fi.costs, budget=200, iterations=5,
                          exploration=2.0, cost_penalty=0.2, max_depth=4, valid=fi.valid)
    np.testing.assert_array_equal(orders[i], np.asarray(single.order))
  # The registry's bridge scorer runs on the features' text signals (entities, groups).
  orders = labels.search_orders(f, "bridge", budget=200, iterations=5, cost_penalty=0.2,
                                exploration=2.0, max_depth=4)
  cost = np.where(orders >= 0, np.take_along_axis(f.costs, np.maximum(orders, 0), 1), 0).sum(1)
  assert (cost <= 200).all() and ((orders >= 0).sum(1) >= 1).all()


def test_batched_search_refuses_a_scorer_that_gives_nan(sample):
  """Issue 20.4: the batched search under `jit(vmap)` returned a NaN question's order (worse,
  silently); `search_orders` now checks each question's `nonfinite` flag and names it."""
  import jax.numpy as jnp
  import jaxsel
  ex, f = sample
  top = np.where(f.valid, f.costs, 0).max(1)
  cut = np.median(top)  # questions with a passage dearer than this get NaN for it

  def dear_is_nan(fi, tok):
    return jaxsel.relevance_scorer(jnp.where(fi.costs > cut, jnp.nan, 1.0))

  bad = np.flatnonzero(top > cut)
  assert 0 < len(bad) < len(top)
  with pytest.raises(ValueError, match=rf"scorer 'dear' returned NaN or infinite values in "
                                       rf"search_orders for {len(bad)} of {len(top)} questions "
                                       rf"\(first: \[{bad[0]}, "):
    labels.search_orders(f, "dear", budget=1e6, iterations=1, cost_penalty=0.2, exploration=2.0,
                         max_depth=2, builders={"dear": dear_is_nan})


def test_features_carry_the_pipelines_text_signals(sample):
  from jaxsel._src import methods
  ex, f = sample
  e = ex[0]
  m = len(e.passages)
  sig = methods.text_signals(e.texts(), list(range(m)), [None] * m, [e.question])
  np.testing.assert_array_equal(f.links[0, :m, :m], sig.links)
  np.testing.assert_array_equal(f.mentioned[0, :m], sig.mentioned)
  np.testing.assert_array_equal(f.entities[0, :m, :m], sig.entities)
  np.testing.assert_array_equal(f.groups[0, :m], sig.groups)
  assert f.mentioned[0].sum() >= 1  # the question names a paragraph's title
  req = qa.request(qa.QAFeatures(*(a[0] for a in f)))
  assert req.signals.entities.shape == (10, 10) and req.signals.groups.shape == (10,)
  # The lexical signals too: the learned scorer reads them, and a label sweep that scored
  # requests without them valued `learned_hops` on zeros (the agent then learned to avoid it).
  assert sig.overlap.max() > 0 and sig.shared.max() > 0
  np.testing.assert_allclose(np.asarray(req.signals.overlap)[:m], sig.overlap)
  np.testing.assert_allclose(np.asarray(req.covered)[:m, :m], sig.covered)
  np.testing.assert_allclose(np.asarray(req.shared)[:m, :m], sig.shared)


def test_training_requests_are_the_pipelines(sample):
  """The request a label sweep scores equals the one `Pipeline.select` solves for the same
  question (one code path: `registry.pipeline_request` over the Pipeline's padding)."""
  from jaxsel._src.pipeline import solve
  ex, f = sample
  e, m = ex[0], len(ex[0].passages)
  sig = jaxsel.contrib.registry.text_signals(e.texts(), list(range(m)), [None] * m, [e.question])
  fi = qa.QAFeatures(*(a[0] for a in f))
  padded = solve.row(solve.pad_batch([(fi.query[None], fi.passages[:m], fi.passages[:m],
                                       fi.costs[:m], sig)], n=fi.passages.shape[0], q=1), 0)
  ours, theirs = qa.request(fi), solve.request(padded)
  for name in ("relevance", "similarity", "costs", "valid"):
    np.testing.assert_allclose(np.asarray(getattr(ours, name)), np.asarray(getattr(theirs, name)),
                               err_msg=name)
  for name in ("links", "mentioned", "entities", "groups", "overlap", "covered", "shared"):
    np.testing.assert_allclose(np.asarray(getattr(ours.signals, name)),
                               np.asarray(getattr(theirs.signals, name)), err_msg=name)


def test_readers_of_the_original_formats(tmp_path):
  hotpot = {"_id": "h1", "question": "Q?", "answer": "A", "supporting_facts": [["T1", 0], ["T2", 1]],
            "context": [["T1", ["One.", " Two."]], ["T3", ["x"]], ["T2", ["Three.", "Four."]],
                        ["T1", ["again"]]]}
  musique = {"id": "2hop__1", "question": "M?", "answer": "B", "answer_aliases": ["b"],
             "paragraphs": [{"idx": 0, "title": "P", "paragraph_text": "p text", "is_supporting": True},
                            {"idx": 1, "title": "R", "paragraph_text": "r text", "is_supporting": False}]}
  p = tmp_path / "f.jsonl"
  p.write_text(json.dumps(hotpot) + "\n" + json.dumps(musique) + "\n")
  h, mq = qa.load_qa_jsonl(str(p))
  assert h.id == "h1" and h.passages == ("One. Two.", "x", "Three. Four.", "again")
  assert h.gold == (True, False, True, True)  # a repeated gold title: every paragraph of it
  assert h.texts()[0] == "T1: One. Two." and h.answers == ("A",)
  assert mq.id == "2hop__1" and mq.gold == (True, False) and mq.answers == ("B", "b")
  assert mq.texts() == ["P: p text", "R: r text"]


def test_label_train_evaluate_scripts_end_to_end(tmp_path, monkeypatch):
  out = tmp_path / "labels" / "labels.jsonl"
  # Features from the stand-in encoder, cached under its name: the scripts then never load a
  # model (the real encoder's path is `qa.featurize`, tested with the same stand-in above).
  ex = qa.load_qa_jsonl(SAMPLE)
  cache = str(tmp_path / "f.npz")
  qa.save_features(cache, qa.featurize(HashEncoder(), ex), [e.id for e in ex], meta={"encoder": "hash"})
  common = ["--data", SAMPLE, "--split", "all", "--no-progress", "--features", cache, "--encoder", "hash"]
  rest = ["--scorers", "relevance,mentions_links", "--iterations", "3",
                   "--cost-penalty", "0.2", "--exploration", "1.5,3.0", "--budget", "200",
                   "--chunk", "2", "--max-depth", "4", "--out", str(out)]
  assert label_queries.main(common + ["--limit", "4"] + rest) == 0
  rows = labels.read_labels(str(out))
  assert len(rows) == 4 and {r["scorer"] for r in rows} <= {"relevance", "mentions_links"}
  assert all(r["iterations"] == 3 and r["exploration"] in (1.5, 3.0) for r in rows)
  assert all(r["score"] >= r["second_score"] for r in rows)
  # Resumable: a second run over 6 questions labels only the 2 new ones.
  assert label_queries.main(common + ["--limit", "6"] + rest) == 0
  rows6 = labels.read_labels(str(out))
  assert len(rows6) == 6 and rows6[:4] == rows
  assert os.path.exists(out.parent / "query_embeddings.npz")

  agent_dir = tmp_path / "agent"
  targs = ["--labels", str(out), "--out", str(agent_dir), "--all", "--batch-size", "4",
           "--hidden", "16,8", "--val-fraction", "0.34", "--no-progress", "--epochs", "2"]
  assert train_script.main(targs) == 0
  metrics = json.load(open(agent_dir / "metrics.json"))
  assert 0 <= metrics["scorer_accuracy"] <= 1 and metrics["train_examples"] == 4
  agent = load_agent(str(agent_dir))
  assert agent.config.scorers == ("relevance", "mentions_links")
  assert agent.config.iterations_range == (3, 3)
  with pytest.raises(ValueError, match="already holds checkpoints"):
    train_script.main(targs)
  assert train_script.main(targs[:-1] + ["3", "--resume"]) == 0
  assert len(json.load(open(agent_dir / "metrics.json"))["history"]) == 3

  # The trained agent through `Pipeline(agent=...)`: extra rows of the evaluation's tables.
  root = tmp_path / "data"
  (root / "train" / "hotpotqa").mkdir(parents=True)
  (root / "train" / "hotpotqa" / "train.jsonl").write_text(open(SAMPLE).read())
  readme = tmp_path / "README.md"
  readme.write_text("# Benchmarks\n\n## Other\n\nkeep me\n")
  eargs = ["--parts", "tables", "--sets", "hotpot_train", "--data-root", str(root), "--limit", "6",
           "--methods", "naive", "--agent", str(agent_dir), "--budgets", "200", "--resamples", "200",
           "--cache", str(tmp_path / "eval"), "--out", str(tmp_path / "eval.json"),
           "--readme", str(readme), "--no-progress"]
  assert evaluate_script.main(eargs, encoder=HashEncoder()) == 0
  rep = json.load(open(tmp_path / "eval.json"))
  res = rep["tables"]["hotpot_train"]["200"]
  assert set(res) == {"naive", "agent", "oracle_paragraph", "oracle_piece"}
  assert res["oracle_piece"]["joint"] >= res["oracle_paragraph"]["joint"]
  assert "joint_diff" in res["agent"]
  text = readme.read_text()
  assert "keep me" in text and "## Evaluation" in text and "CORAG + agent" in text
  # Rewriting replaces the generated section and keeps its hand-written tail.
  from training import answers
  assert text.index("## Other") < text.index("## Evaluation")  # appended: the last section
  readme.write_text(text + "\n" + answers.KEEP + "\n\nmy notes\n")
  evaluate_script.main(eargs, encoder=HashEncoder())
  again = readme.read_text()
  assert again.count("## Evaluation") == 1 and "keep me" in again and "CORAG + agent" in again
  assert again.endswith("\n" + answers.KEEP + "\n\nmy notes\n")
  assert again.count(answers.KEEP) == 1 and again.index("CORAG + agent") < again.index("my notes")


def test_finalize_labels_ties_go_to_the_choice_best_on_average():
  settings = [[5, 0.1, 1.0], [15, 0.2, 2.0]]

  def row(i, q):
    return {"id": str(i), "scorers": ["a", "b", "c"], "settings": settings, "quality": q}

  rows = [row(0, [[1.0, 1.0], [1.0, 1.0], [0.5, 0.5]]),  # a and b tie: b is better on average
          row(1, [[0.2, 0.2], [0.9, 1.0], [0.1, 0.1]]),  # b clearly, with the second setting
          row(2, [[0.5, 0.5], [0.5, 0.6], [1.2, 0.4]])]  # c by 1.2 / 0.6 = 2x: kept
  out = labels.finalize_labels(rows, margin=0.1)
  assert [r["scorer"] for r in out] == ["b", "b", "c"]
  assert out[0]["iterations"] == 15  # tie between settings: b's second is better on average
  assert out[1]["iterations"] == 15 and out[1]["cost_penalty"] == 0.2
  assert [r["keep"] for r in out] == [False, True, True]
  assert out[2]["second_scorer"] == "b" and out[2]["second_score"] == 0.6
  with pytest.raises(ValueError, match="different scorers"):
    labels.finalize_labels(rows + [{**rows[0], "id": "x", "scorers": ["a", "b"]}])
  # With a tolerance, a near tie goes to the scorer that is best on average.
  near = [row(0, [[1.0, 1.0], [0.97, 0.9], [0.5, 0.5]])] + rows[1:]
  assert labels.finalize_labels(near, tie_tolerance=0.0)[0]["scorer"] == "a"
  assert labels.finalize_labels(near, tie_tolerance=0.05)[0]["scorer"] == "b"


def test_model_scorer_in_the_sweep(sample):
  """The embedding scorer (a model call per scored order) runs in the batched sweep and
  agrees with a direct search."""
  from jaxsel.testing import tiny_encoder
  from jaxsel._src.search import corag_search
  ex, f = sample
  enc = tiny_encoder()
  f2 = qa.take(f, [0, 1])
  f2 = f2._replace(query=np.asarray(enc.encode([e.question for e in ex[:2]])))
  tok = qa.tokenize(enc.tokenizer, ex[:2], n_max=10, max_chunk_tokens=12)
  assert tok.chunk_ids.shape == (2, 10, 12) and (tok.chunk_lens[0] == 12).all()
  builders = labels.model_scorer_builders(enc, max_len=32)
  orders = labels.search_orders(f2, "embedding", budget=250, iterations=1, cost_penalty=0.2,
                                exploration=2.0, max_depth=2, builders=builders,
                                tokens={"embedding": tok})
  fi, ti = qa.QAFeatures(*(a[1] for a in f2)), qa.QATokens(*(a[1] for a in tok))
  single = corag_search(builders["embedding"](fi, ti), fi.costs, budget=250, iterations=1,
                        exploration=2.0, cost_penalty=0.2, max_depth=2, valid=fi.valid)
  np.testing.assert_array_equal(orders[1], np.asarray(single.order))


class _Counting:
  """A generator that records the prompts it is given and passes them to the real one."""

  def __init__(self, generator):
    self.inner, self.name, self.prompts = generator, generator.name, []

  def generate(self, prompts, max_new_tokens=32):
    self.prompts += list(prompts)
    return self.inner.generate(prompts, max_new_tokens=max_new_tokens)


@pytest.mark.slow
def test_labelling_by_generated_answers_with_the_offline_smollm2(sample, tmp_path,
                                                                one_torch_thread):
  """The paper's protocol: each distinct selection is answered once by the real SmolLM2 from
  the prompt `Pipeline.answer` sends, and scored F1 + ROUGE-L against the gold answers."""
  import jaxsel
  from jaxsel._src import generation
  from training import answers
  ex, f = sample
  ex3, f3 = ex[:3], qa.take(f, [0, 1, 2])
  gen = _Counting(generation.default_generator(batch_size=8))
  cache = answers.AnswerCache(str(tmp_path / "answers.json"))
  quality = labels.AnswerQuality(gen, cache=cache, max_new_tokens=8)
  scorers = ["relevance", "mentions_links"]
  grid = labels.LabelGrid((5,), (0.2,), (1.5, 3.0))
  table = labels.sweep_batch(ex3, f3, scorers=scorers, budget=200, grid=grid, max_depth=4,
                             quality_fn=quality)
  assert table.shape == (3, 2, 2)
  prompts = {}
  for si, s in enumerate(scorers):
    for g, (it, lam, c) in enumerate(grid.settings()):
      orders = labels.search_orders(f3, s, budget=200, iterations=it, cost_penalty=lam,
                                    exploration=c, max_depth=4)
      for i, e in enumerate(ex3):
        prompt = labels.answer_prompt(e.question, e.texts(), orders[i])
        answer = cache.get(answers.cache_key(gen.name, 8, prompt))
        scores = jaxsel.contrib.answer_scores(answer, [a for a in e.answers if a.strip()])
        assert table[i, si, g] == pytest.approx(scores["f1"] + scores["rougeL"])
        prompts[prompt] = answer
  # One generation per distinct selection, none repeated; the cached answers are the model's.
  assert sorted(gen.prompts) == sorted(prompts) and quality.generated == len(prompts)
  first = next(iter(prompts))
  assert gen.inner.generate([first], max_new_tokens=8) == [prompts[first]]
  # A second sweep reads every answer from the cache.
  again = labels.AnswerQuality(gen, cache=answers.AnswerCache(str(tmp_path / "answers.json")),
                               max_new_tokens=8)
  np.testing.assert_array_equal(labels.sweep_batch(ex3, f3, scorers=scorers, budget=200, grid=grid,
                                                   max_depth=4, quality_fn=again), table)
  assert again.generated == 0
  # The prompt is the one `Pipeline.answer` builds (default template, document order).
  pipe = jaxsel.Pipeline(HashEncoder(), method="naive", progress=False)
  e = ex3[0]
  whole = [jaxsel.Passage(t, 0, len(t), doc=i, tokens=int(c))  # one passage per paragraph
           for i, (t, c) in enumerate(zip(e.texts(), f3.costs[0]))]
  sel = pipe.select(e.question, whole, budget=200, granularity="passage")  # whole paragraphs
  picks = [p.doc for p in sel.passages]
  assert len(picks) >= 2 and picks != sorted(picks)  # the prompt reorders them
  assert labels.answer_prompt(e.question, e.texts(), picks + [-1]) == answers.answer_prompt(sel)


def test_label_queries_answer_options_need_label_by_answers():
  with pytest.raises(SystemExit):
    label_queries.parse_args(["--generator", "some/model"])
  with pytest.raises(SystemExit):
    label_queries.parse_args(["--label-by", "answers", "--generator", "a", "--gguf", "b.gguf"])
  args = label_queries.parse_args(["--label-by", "answers", "--gguf", "b.gguf"])
  assert args.gguf == "b.gguf" and args.generator is None


def test_one_command_runs_every_research_entry_point(capsys):
  """`python -m training COMMAND`: each command names a module of the folder with `main(argv)`,
  or a function (`module:function`, the runner's grids); an unknown command is refused with the
  list."""
  import importlib
  from training import __main__ as command
  for name, target in command.COMMANDS.items():
    module, _, function = target.partition(":")
    assert callable(getattr(importlib.import_module(f"training.{module}"), function or "main")), name
  assert command.main(["bogus"]) == 2 and "unknown command 'bogus'" in capsys.readouterr().err
  assert command.main([]) == 0 and "python -m training defaults" in capsys.readouterr().out


def test_research_files_write_atomically_and_the_old_public_module_warns(tmp_path):
  """`training/files.py` writes whole files (a failing write leaves the old one, no
  temporary file behind); `jaxsel.files` still works but says it is deprecated."""
  target = tmp_path / "out.json"
  files.atomic_write(target, b"old")
  with pytest.raises(TypeError):
    files.atomic_write(target, object())  # not bytes: the write fails midway
  assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.json"]
  files.atomic_savez(tmp_path / "a.npz", x=np.arange(3))
  assert np.load(tmp_path / "a.npz")["x"].tolist() == [0, 1, 2]
  assert files.file_sha256(target) == hashlib.sha256(b"old").hexdigest()

  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    jaxsel.files.atomic_write(tmp_path / "b.bin", b"new")
  assert (tmp_path / "b.bin").read_bytes() == b"new"
  assert any(issubclass(w.category, DeprecationWarning) and "jaxsel.files.atomic_write" in
             str(w.message) for w in caught)

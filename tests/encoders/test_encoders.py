"""Encoders on tiny random configs: parity with transformers' PyTorch models, loading, API.

References: `transformers.BertModel`, `XLMRobertaModel`, `BertForSequenceClassification`,
`XLMRobertaForSequenceClassification` (PyTorch, CPU, eager attention) with random weights,
saved with `save_pretrained` and loaded back through jaxsel's public loaders.
"""

import hashlib
import json
import os
import re
import shutil
import stat
import struct
import threading
import time

import numpy as np
import jax
import jax.numpy as jnp
import pytest
import torch
import transformers
from flax import nnx
from safetensors.numpy import load_file, save_file

import jaxsel
from jaxsel import testing
from jaxsel._src.encoders import batching, bert, loading, sentence, store

TOL = 1e-5
TEXTS = ["the cat sat on the mat.", "a", "dogs bark at night, loudly!",
         "one two three four five six seven eight nine ten", "x y z", "hello world"]


def _torch_model(cls, cfg, seed):
  torch.manual_seed(seed)
  model = cls(cfg.to_hf()).eval()
  with torch.no_grad():  # every parameter random, LayerNorms and biases included
    for p in model.parameters():
      p.normal_(0.0, 0.2)
  model.config._attn_implementation = "eager"
  return model


def _save(tmp_path_factory, name, model, model_type, **kw):
  folder = tmp_path_factory.mktemp(name)
  model.save_pretrained(folder, **kw)
  testing.tiny_tokenizer(model_type).save_pretrained(folder)
  return folder


def _batch(cfg, seed, lengths=(16, 4, 11, 1)):
  """Random ids `[B, L]` with right padding (pad id where the mask is 0)."""
  rng = np.random.default_rng(seed)
  b, l = len(lengths), max(lengths)
  ids = rng.integers(3, cfg.vocab_size, size=(b, l)).astype(np.int32)
  ids[ids == cfg.pad_token_id] = 5
  mask = (np.arange(l)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
  ids = np.where(mask == 1, ids, cfg.pad_token_id).astype(np.int32)
  tt = (np.arange(l)[None] >= 3).astype(np.int32) * mask if cfg.type_vocab_size > 1 else np.zeros_like(ids)
  return ids, mask, tt


@pytest.fixture(scope="module", params=["bert", "xlm-roberta"])
def backbone(request, tmp_path_factory):
  cfg = testing.tiny_bert_config() if request.param == "bert" else testing.tiny_xlmr_config()
  cls = transformers.BertModel if request.param == "bert" else transformers.XLMRobertaModel
  model = _torch_model(cls, cfg, seed=1)
  folder = _save(tmp_path_factory, request.param, model, request.param)
  return cfg, model, folder


@pytest.fixture(scope="module", params=[("bert", 3), ("xlm-roberta", 1)])
def classifier(request, tmp_path_factory):
  kind, labels = request.param
  cfg = (testing.tiny_bert_config() if kind == "bert" else testing.tiny_xlmr_config()).replace(num_labels=labels)
  cls = (transformers.BertForSequenceClassification if kind == "bert"
         else transformers.XLMRobertaForSequenceClassification)
  model = _torch_model(cls, cfg, seed=2)
  folder = _save(tmp_path_factory, kind + "-cls", model, kind)
  return cfg, model, folder


@pytest.fixture(scope="module")
def tiny():
  return testing.tiny_encoder(seed=3)


def _torch_out(model, ids, mask, tt):
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids, dtype=torch.long),
                 attention_mask=torch.tensor(mask, dtype=torch.long),
                 token_type_ids=torch.tensor(tt, dtype=torch.long))


# ----------------------------------------------------------------------------- parity

def test_backbone_matches_pytorch_with_padding(backbone):
  cfg, ref, folder = backbone
  enc = jaxsel.load_encoder(folder, normalize=False)
  assert enc.config.model_type == cfg.model_type and enc.config.pooler

  @jax.jit  # one compiled program per family keeps the test fast
  def outputs(params, ids, mask, tt):
    model = nnx.merge(enc.graphdef, params)
    hidden = model(ids, mask, tt)
    # dense layers on the 32 real tokens, packed into 40 rows (the last 8 are filler)
    packed = model(ids, mask, tt, tokens=40)
    return hidden, packed, model.pooled(hidden), enc.apply(params, ids, mask, tt)

  for seed in range(2):
    ids, mask, tt = _batch(cfg, seed)
    out = _torch_out(ref, ids, mask, tt)
    hidden, packed, pooled, mean_pooled = outputs(enc.params, ids, mask, tt)
    # every position, padding included, matches
    np.testing.assert_allclose(np.asarray(hidden), out.last_hidden_state.numpy(), atol=TOL, rtol=0)
    # packed: the real tokens match and the pads are zero
    real = mask[..., None] == 1
    np.testing.assert_allclose(np.asarray(packed), np.where(real, out.last_hidden_state.numpy(), 0),
                               atol=TOL, rtol=0)
    np.testing.assert_allclose(np.asarray(pooled), out.pooler_output.numpy(), atol=TOL, rtol=0)
    # and the jit-able entry point pools the same hidden states (mean over real tokens)
    h = out.last_hidden_state.numpy()
    mean = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(mean_pooled), mean, atol=TOL, rtol=0)


def test_classifier_matches_pytorch_with_padding(classifier):
  cfg, ref, folder = classifier
  ce = jaxsel.load_cross_encoder(folder)
  assert ce.num_labels == cfg.num_labels
  ids, mask, tt = _batch(cfg, 7, lengths=(64, 5, 3, 30))  # the shape `score` uses below
  want = _torch_out(ref, ids, mask, tt).logits.numpy()
  got = np.asarray(ce.logits_fn(ids, mask, tt))
  assert got.shape == (4, cfg.num_labels)
  np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


def test_cross_encoder_score_matches_pytorch_pairs(classifier):
  cfg, ref, folder = classifier
  ce = jaxsel.load_cross_encoder(folder)
  query, passages = "where is the cat?", ["the cat is on the mat.", "dogs bark.", "no", "the mat"]
  pt = ce.tokenizer([query] * len(passages), passages, padding=True, return_tensors="pt")
  with torch.no_grad():
    want = ref(**pt).logits.numpy()
  got = np.asarray(ce.score(query, passages, batch_size=4))
  want = want[:, 0] if cfg.num_labels == 1 else want
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


def test_special_token_ids(backbone, classifier):
  enc = jaxsel.load_encoder(backbone[2])
  tok = enc.tokenizer
  assert (enc.cls_token_id, enc.sep_token_id, enc.pad_token_id) == (
      tok.cls_token_id, tok.sep_token_id, tok.pad_token_id)
  ids = tok(["ab"])["input_ids"][0]
  assert ids[0] == enc.cls_token_id and ids[-1] == enc.sep_token_id
  assert enc.pad_token_id == backbone[0].pad_token_id


# ----------------------------------------------------------------------------- loading

def test_pytorch_bin_and_sharded_safetensors_load_the_same(backbone, tmp_path):
  cfg, ref, folder = backbone
  base = jaxsel.load_encoder(folder)
  ids, mask, tt = _batch(cfg, 3)
  want = np.asarray(base.apply_fn(ids, mask, tt))
  for name in ("bin", "shards"):
    sub = tmp_path / name
    if name == "bin":  # transformers 5 only writes safetensors; save as older versions did
      sub.mkdir()
      ref.config.save_pretrained(sub)
      torch.save(ref.state_dict(), sub / "pytorch_model.bin")
    else:
      ref.save_pretrained(sub, max_shard_size="20KB")
    testing.tiny_tokenizer(cfg.model_type).save_pretrained(sub)
    files = {p.name for p in sub.iterdir()}
    if name == "bin":
      assert "pytorch_model.bin" in files and not any(f.endswith(".safetensors") for f in files)
    else:
      assert "model.safetensors.index.json" in files
    got = np.asarray(jaxsel.load_encoder(sub).apply_fn(ids, mask, tt))
    np.testing.assert_array_equal(got, want)


def _copy_with_weights(src, dst, edit):
  shutil.copytree(src, dst)
  state = load_file(str(dst / "model.safetensors"))
  edit(state)
  save_file(state, str(dst / "model.safetensors"), metadata={"format": "pt"})
  return dst


def test_key_mismatches_raise_with_the_key_name(backbone, tmp_path):
  _, _, folder = backbone
  key = "encoder.layer.1.attention.self.value.weight"

  def drop(s):
    del s[key]
  with pytest.raises(loading.CheckpointError, match=r"missing.*" + key.replace(".", r"\.")):
    jaxsel.load_encoder(_copy_with_weights(folder, tmp_path / "drop", drop))

  def extra(s):
    s["encoder.layer.1.surprise.weight"] = np.zeros(3, np.float32)
  with pytest.raises(loading.CheckpointError, match=r"unmapped.*surprise"):
    jaxsel.load_encoder(_copy_with_weights(folder, tmp_path / "extra", extra))

  def reshape(s):
    s[key] = s[key][:, :-1].copy()
  with pytest.raises(loading.CheckpointError, match=r"wrongly shaped.*" + key.replace(".", r"\.")):
    jaxsel.load_encoder(_copy_with_weights(folder, tmp_path / "shape", reshape))


def test_loading_errors(backbone, classifier, tmp_path):
  _, _, folder = backbone
  empty = tmp_path / "no_weights"
  empty.mkdir()
  shutil.copy(folder / "config.json", empty / "config.json")
  with pytest.raises(FileNotFoundError, match="No weights"):
    jaxsel.load_encoder(empty)
  with pytest.raises(FileNotFoundError, match="config.json"):
    jaxsel.load_encoder(tmp_path)
  with pytest.raises(FileNotFoundError, match="No checkpoint folder"):
    jaxsel.load_encoder(tmp_path / "nowhere" / "at_all")
  with pytest.raises(TypeError, match="name_or_path"):
    jaxsel.load_encoder(None)
  with pytest.raises(TypeError, match="name_or_path"):
    jaxsel.load_encoder(3)
  with pytest.raises(ValueError, match="dtype"):
    jaxsel.load_encoder(folder, dtype=jnp.int32)
  with pytest.raises(ValueError, match="max_length"):
    jaxsel.load_encoder(folder, max_length=10_000)
  with pytest.raises(ValueError, match="pooling"):
    jaxsel.load_encoder(folder, pooling="median")
  with pytest.raises(ValueError, match="ForSequenceClassification"):
    jaxsel.load_cross_encoder(folder)


def test_hub_ids_resolve_through_huggingface_hub(backbone, monkeypatch):
  import huggingface_hub
  _, _, folder = backbone
  calls = []

  def fake_download(repo_id, allow_patterns=None, **kw):
    calls.append((repo_id, allow_patterns))
    return str(folder)
  monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
  enc = jaxsel.load_encoder("some-org/tiny-model")
  assert enc.name == "some-org/tiny-model" and enc.config.hidden_size == 32
  assert calls[0][0] == "some-org/tiny-model" and "model*.safetensors" in calls[0][1]

  def offline(*args, **kw):
    raise OSError("no connection")
  monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
  with pytest.raises(FileNotFoundError, match="neither a local folder.*no connection"):
    jaxsel.load_encoder("some-org/other-model")


def test_sentence_transformers_settings(backbone, tmp_path):
  _, _, folder = backbone
  st = tmp_path / "st"
  shutil.copytree(folder, st)
  (st / "modules.json").write_text(json.dumps([
      {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
      {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
  (st / "1_Pooling").mkdir()
  (st / "1_Pooling" / "config.json").write_text(json.dumps(
      {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
  (st / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20}))
  (st / "config_sentence_transformers.json").write_text(json.dumps(
      {"prompts": {"query": "q: ", "doc": "d: "}}))
  enc = jaxsel.load_encoder(st)
  assert (enc.pooling, enc.max_length, enc.normalize) == ("cls", 20, False)
  assert enc.prompts == {"query": "q: ", "passage": "", "doc": "d: "}
  assert jaxsel.load_encoder(st, pooling="mean", max_length=30).pooling == "mean"
  modules = json.loads((st / "modules.json").read_text())
  modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
  (st / "modules.json").write_text(json.dumps(modules))
  with pytest.raises(ValueError, match="Dense"):
    jaxsel.load_encoder(st)


def test_family_prompt_presets():
  assert sentence.preset_prompts("intfloat/e5-small-v2") == {"query": "query: ", "passage": "passage: "}
  assert sentence.preset_prompts("/models/multilingual-e5-base/") == sentence.PROMPT_PRESETS["e5"]
  assert sentence.preset_prompts("BAAI/bge-small-en-v1.5") == sentence.PROMPT_PRESETS["bge-en"]
  assert sentence.preset_prompts("BAAI/bge-m3") == {}
  assert sentence.preset_prompts("sentence-transformers/all-MiniLM-L6-v2") == {}


# ----------------------------------------------------------------------------- encode

def test_bucketing_and_batch_size_do_not_change_results(tiny):
  texts = TEXTS * 2
  # batch 4 pads to the buckets 48, 32 and 16 (character-level tokens); batch 12 pads all to 48
  full = np.asarray(tiny.encode(texts, batch_size=12))
  assert full.shape == (len(texts), tiny.dim)
  np.testing.assert_allclose(np.linalg.norm(full, axis=1), 1.0, atol=1e-6)
  np.testing.assert_allclose(np.asarray(tiny.encode(texts, batch_size=4)), full, atol=TOL, rtol=0)
  np.testing.assert_array_equal(full[:6], full[6:])


def test_packed_tokens_round_up_to_a_sixteenth_of_large_batches(tiny):
  pack = batching.packed_tokens
  assert pack(1000, 32, 64) == 1024  # 2048 positions in steps of 128
  assert pack(1025, 32, 64) == 1152 and pack(768, 32, 64) == 768
  assert pack(1921, 32, 64) is None  # rounds up to the whole batch: run it padded
  assert pack(1920, 32, 64) == 1920
  assert pack(10, 4, 64) is None  # under PACK_MIN positions
  with pytest.raises(ValueError, match="tokens"):
    nnx.merge(tiny.graphdef, tiny.params)(np.zeros((2, 4), np.int32), np.ones((2, 4), np.int32),
                                          tokens=9)
  # a batch of 32 texts padded to 64 (char-level) tokens is packed; the result is the same
  texts = [t[:40] * 2 for t in TEXTS * 6][:32]
  ids = tiny.tokenize(texts)["input_ids"]
  assert pack(sum(map(len, ids)), 32, 64) is not None
  one_by_one = np.concatenate([np.asarray(tiny.encode(texts[i:i + 4], batch_size=4))
                               for i in range(0, 32, 4)])
  np.testing.assert_allclose(np.asarray(tiny.encode(texts)), one_by_one, atol=TOL, rtol=0)


def test_compiler_options_leave_xla_flags_to_the_user(monkeypatch):
  opts = batching.compiler_options
  assert opts() == batching.CPU_COMPILER_OPTIONS  # the CPU backend accepts them
  try:
    opts.cache_clear()
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=reduce")
    assert opts() == {}
  finally:
    monkeypatch.undo()
    opts.cache_clear()
  assert opts() == batching.CPU_COMPILER_OPTIONS


def test_a_corpus_compiles_a_handful_of_shapes(tiny):
  rng = np.random.default_rng(0)
  words = "alpha beta gamma delta eps zeta eta theta".split()
  texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 12, size=200)]
  ids = tiny.tokenize(texts)["input_ids"]
  shapes = {b[1].shape for b in batching.bucketed_batches(
      ids, None, batch_size=16, max_length=512, pad_id=0)}
  assert {s[1] for s in shapes} <= set(batching.bucket_lengths(512))
  # 200 texts of up to 64 tokens in 13 batches: the lengths 16, 32, 48, 64 (+ the last batch)
  assert len(shapes) <= 5, shapes
  before = sentence._forward.jitted._cache_size()
  tiny.encode(texts[:40], batch_size=4)  # 10 batches
  assert sentence._forward.jitted._cache_size() - before <= 4


def test_token_output_shapes_and_masking(tiny):
  ids = tiny.tokenizer(TEXTS)["input_ids"]
  lens = np.array([len(x) for x in ids])
  tok = tiny.encode(TEXTS * 2, output="tokens", normalize=False, batch_size=4)
  tok = sentence.TokenEmbeddings(*(x[:len(TEXTS)] for x in tok))
  assert isinstance(tok, sentence.TokenEmbeddings)
  assert tok.embeddings.shape == (len(TEXTS), lens.max(), tiny.dim)
  assert tok.mask.shape == tok.input_ids.shape == (len(TEXTS), lens.max())
  np.testing.assert_array_equal(np.asarray(tok.mask).sum(1), lens)
  assert not np.asarray(tok.embeddings)[~np.asarray(tok.mask)].any()
  for i, x in enumerate(ids):
    np.testing.assert_array_equal(np.asarray(tok.input_ids)[i, :len(x)], x)
  # the mean of the token vectors over the mask is the pooled output
  m = np.asarray(tok.mask)[..., None]
  mean = (np.asarray(tok.embeddings) * m).sum(1) / m.sum(1)
  pooled = np.asarray(tiny.encode(TEXTS * 2, normalize=False, batch_size=4))[:len(TEXTS)]
  np.testing.assert_allclose(pooled, mean, atol=TOL, rtol=0)
  unit = tiny.encode(TEXTS * 2, output="tokens", batch_size=4)
  norms = np.linalg.norm(np.asarray(unit.embeddings), axis=-1)
  np.testing.assert_allclose(norms[np.asarray(unit.mask)], 1.0, atol=1e-5)


def test_late_chunking_pools_the_spans_tokens(tiny):
  text = "the cat sat. a dog ran far away. end"
  spans = [(0, 12), (13, 32), (33, 36), (0, 36)]
  got = np.asarray(tiny.encode_chunks(text, spans, normalize=False))
  assert got.shape == (4, tiny.dim)
  enc = tiny.tokenizer([text], return_offsets_mapping=True)
  offs = np.asarray(enc["offset_mapping"][0])
  tok = np.asarray(tiny.encode([text], output="tokens", normalize=False).embeddings[0])
  for row, (a, b) in zip(got, spans):
    inside = [j for j, (s, e) in enumerate(offs) if e > s and s < b and e > a]
    np.testing.assert_allclose(row, tok[inside].mean(0), atol=TOL, rtol=0)
  # the whole text's span differs from mean pooling only by the special tokens
  assert not np.allclose(got[3], np.asarray(tiny.encode([text], normalize=False))[0], atol=1e-4)
  # context matters: the same span embedded alone gives another vector
  alone = np.asarray(tiny.encode_chunks(text[:12], [(0, 12)], normalize=False))[0]
  assert not np.allclose(alone, got[0], atol=1e-4)
  unit = np.asarray(tiny.encode_chunks(text, spans))
  np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
  # a prompt shifts the tokens but not the spans
  pre = np.asarray(tiny.encode_chunks(text, spans, prompt="q: ", normalize=False))
  assert pre.shape == got.shape and not np.allclose(pre, got, atol=1e-4)


def test_late_chunking_errors(tiny):
  text = "short text"
  for bad, err in [([], ValueError), (None, TypeError), ([(3, 3)], ValueError), ([(0, 99)], ValueError),
                   ([(0.0, 2)], TypeError), ([(1,)], TypeError), ([(-1, 2)], ValueError)]:
    with pytest.raises(err, match="pan"):
      tiny.encode_chunks(text, bad)
  with pytest.raises(ValueError, match="no token"):
    tiny.encode_chunks("ab" + " " * 5, [(3, 6)])
  # Past the model's length the text goes through windows; a span longer than a window cannot.
  long = " ".join(["word"] * 40)
  with pytest.raises(ValueError, match="more than the .* text tokens of one window"):
    tiny.encode_chunks(long, [(0, len(long))])
  with pytest.raises(ValueError, match="`overlap`"):
    tiny.encode_chunks(long, [(0, 4)], overlap=1000)


def _manual_pool(enc, window: str, span, prefix: str = ""):
  """Mean of the window's token vectors over `span` (window coordinates), from `encode(...,
  output="tokens")` and the tokenizer's own offsets: the late-chunking definition restated."""
  offs = np.asarray(enc.tokenizer([prefix + window], return_offsets_mapping=True)["offset_mapping"][0])
  offs = offs - len(prefix)
  tok = np.asarray(enc.encode([window], prompt=prefix, output="tokens", normalize=False).embeddings[0])
  inside = [j for j, (s, e) in enumerate(offs) if e > s and s >= 0 and s < span[1] and e > span[0]]
  v = tok[inside].mean(0)
  return v / np.linalg.norm(v)


@pytest.mark.parametrize("prefix", ["", "q: "])
def test_late_chunking_of_a_text_longer_than_the_model(tiny, prefix):
  """Windows of `max_length` tokens: each span is pooled from the token states of one window
  that holds it whole, the way the short path pools (restated here from `encode(output=
  "tokens")` and the tokenizer's offsets)."""
  words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
  text = " ".join(words[i % 8] + str(i) for i in range(60))  # ~400 characters, > 64 tokens
  spans = []
  for m in re.finditer(r"\S+ \S+", text):  # two-word chunks
    spans.append(m.span())
  got = np.asarray(tiny.encode_chunks(text, spans, prompt=prefix))
  assert got.shape == (len(spans), tiny.dim)
  offs = np.asarray(tiny.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                                   verbose=False)["offset_mapping"])
  capacity = tiny.max_length - 2 - len(tiny.tokenizer(prefix, add_special_tokens=False)["input_ids"])
  assert len(offs) > capacity  # the long path really runs
  windows = {}
  for a in range(0, len(offs) - capacity + 1):  # every window of `capacity` tokens
    cs, ce = int(offs[a, 0]), int(offs[a + capacity - 1, 1])
    windows[a] = (cs, ce)
  for row, (s0, s1) in zip(got, spans):
    matches = [a for a, (cs, ce) in windows.items() if cs <= s0 and s1 <= ce and np.allclose(
        row, _manual_pool(tiny, text[cs:ce], (s0 - cs, s1 - cs), prefix), atol=1e-4)]
    assert matches, (s0, s1)
  # Context reaches across windows: a middle chunk differs from the same words embedded alone.
  mid = len(spans) // 2
  alone = np.asarray(tiny.encode_chunks(text[spans[mid][0]:spans[mid][1]], [(0, spans[mid][1] - spans[mid][0])],
                                        prompt=prefix))[0]
  assert not np.allclose(alone, got[mid], atol=1e-3)
  with pytest.raises(TypeError, match="text"):
    tiny.encode_chunks(["a list"], [(0, 1)])


def test_prompts_are_applied_per_call():
  enc = testing.tiny_encoder(seed=5, prompts={"query": "query: ", "passage": "passage: "})
  t = ["the cat"]
  q = np.asarray(enc.encode(t, prompt_name="query"))
  np.testing.assert_array_equal(q, np.asarray(enc.encode(["query: the cat"])))
  np.testing.assert_array_equal(q, np.asarray(enc.encode(t, prompt="query: ")))
  p = np.asarray(enc.encode(t, prompt_name="passage"))
  plain = np.asarray(enc.encode(t))
  assert not np.allclose(q, p) and not np.allclose(p, plain)
  with pytest.raises(ValueError, match="Unknown `prompt_name`.*passage"):
    enc.encode(t, prompt_name="instruction")
  with pytest.raises(ValueError, match="not both"):
    enc.encode(t, prompt="x", prompt_name="query")
  with pytest.raises(TypeError, match="prompt"):
    enc.encode(t, prompt=3)


def test_bad_inputs_get_clear_errors(tiny):
  for bad, err, msg in [([], ValueError, "empty"), (None, TypeError, "None"),
                        ("one string", TypeError, "single str"), (["ok", 3], TypeError, "item 1"),
                        (5, TypeError, "list of strings")]:
    with pytest.raises(err, match=msg):
      tiny.encode(bad)
  with pytest.raises(ValueError, match="batch_size"):
    tiny.encode(["a"], batch_size=0)
  with pytest.raises(ValueError, match="output"):
    tiny.encode(["a"], output="cls")
  ce = testing.tiny_cross_encoder()
  with pytest.raises(TypeError, match="query"):
    ce.score(None, ["a"])
  with pytest.raises(ValueError, match="passages"):
    ce.score("q", [])


def test_apply_fn_is_jittable_and_vmappable(tiny):
  texts = ["ab cd", "efg", "hello", "x"]
  enc = tiny.tokenizer(texts, padding="max_length", max_length=16)
  ids, mask = np.asarray(enc["input_ids"]), np.asarray(enc["attention_mask"])
  want = np.asarray(tiny.encode(texts, batch_size=4))  # the same (4, 16) shape
  np.testing.assert_allclose(np.asarray(jax.jit(tiny.apply_fn)(ids, mask)), want, atol=TOL)
  per_row = jax.jit(jax.vmap(lambda p, i, m: tiny.apply(p, i[None], m[None])[0],
                             in_axes=(None, 0, 0)))(tiny.params, ids, mask)
  np.testing.assert_allclose(np.asarray(per_row), want, atol=TOL)


def test_bfloat16_is_close_to_float32(tiny):
  bf16 = testing.tiny_encoder(seed=3, dtype=jnp.bfloat16)
  assert bf16.dtype == jnp.bfloat16 and tiny.dtype == jnp.float32
  texts = ["a", "x y z", "hello world", "ab"]
  a, b = np.asarray(tiny.encode(texts)), np.asarray(bf16.encode(texts))
  assert b.dtype == np.float32
  cos = (a * b).sum(1)
  assert cos.min() > 0.99, cos


def test_tiny_models_for_other_modules():
  for cfg in (testing.tiny_bert_config(), testing.tiny_xlmr_config()):
    enc = testing.tiny_encoder(cfg)
    assert enc.config == cfg and enc.dim == cfg.hidden_size
    ce = testing.tiny_cross_encoder(cfg, num_labels=2)
    assert ce.logits_fn(jnp.ones((4, 16), jnp.int32) * 7, jnp.ones((4, 16), jnp.int32)).shape == (4, 2)
  assert testing.tiny_encoder(testing.tiny_xlmr_config()).encode(["a b"]).shape == (1, 32)


# ----------------------------------------------------------------------------- start-up (issue 24)

@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_shape_only_build_equals_eval_shape(dtype):
  """The loaders build their modules with `bert.ShapeOnly()` (no initialiser traced; 0.05
  instead of 0.35 CPU s for MiniLM): the same graph and parameter shapes/dtypes as
  `nnx.eval_shape` of a real build, for every family and head."""
  for cfg in (testing.tiny_bert_config(pooler=True), testing.tiny_xlmr_config(),
              testing.tiny_bert_config(num_labels=3), testing.tiny_xlmr_config(num_labels=1)):
    cls = bert.SequenceClassifier if cfg.num_labels else bert.BertModel
    fast = cls(cfg, dtype=dtype, rngs=bert.ShapeOnly())
    ref = nnx.eval_shape(lambda: cls(cfg, dtype=dtype, rngs=nnx.Rngs(0)))
    (g1, s1), (g2, s2) = nnx.split(fast), nnx.split(ref)
    assert g1 == g2
    flat = lambda s: [(p, type(v), v.get_value()) for p, v in nnx.to_flat_state(s)]
    assert flat(s1) == flat(s2) and all(isinstance(v, jax.ShapeDtypeStruct) for *_, v in flat(s1))


def _long_texts(n=48):
  """`n` texts of 20-30 characters (tiny_tokenizer: a token per character), > 512 tokens."""
  rng = np.random.default_rng(0)
  return [" ".join("".join(rng.choice(list("abcdefghij"), size=4)) for _ in range(5 + i % 2))
          for i in range(n)]


@pytest.fixture
def model_rows(monkeypatch):
  """Counts the real rows (texts) that go through the model: a list, one entry per batch."""
  rows = []
  forward = sentence._forward

  def counting(graphdef, params, ids, mask, *args, **kwargs):
    rows.append(int((np.asarray(mask).sum(1) > 0).sum()))
    return forward(graphdef, params, ids, mask, *args, **kwargs)

  monkeypatch.setattr(sentence, "_forward", counting)
  return rows


def test_embedding_cache_reads_back_the_same_bytes(backbone, tmp_path, model_rows):
  """A second encoder loaded from the same unchanged checkpoint (a later process) reads a
  stored `encode` call instead of running the model; the bytes equal a fresh run's. Queries
  (small calls) are not stored; another prompt, normalisation or batch size, a changed
  checkpoint file, or replaced weights are misses."""
  _, _, src = backbone
  folder = tmp_path / "ckpt"
  shutil.copytree(src, folder)
  texts, cache = _long_texts(), tmp_path / "emb"
  plain = np.asarray(jaxsel.load_encoder(folder).encode(texts))
  model_rows.clear()
  first = np.asarray(jaxsel.load_encoder(folder).with_embedding_cache(cache).encode(texts))
  assert sum(model_rows) == len(texts) and len(list(cache.glob("*.emb"))) == 1
  np.testing.assert_array_equal(first, plain)
  model_rows.clear()
  enc = jaxsel.load_encoder(folder).with_embedding_cache(cache)
  np.testing.assert_array_equal(np.asarray(enc.encode(texts)), plain)
  assert model_rows == []  # read back: the model did not run
  enc.encode(["a short query"])
  assert model_rows == [1] and len(list(cache.glob("*.emb"))) == 1  # not stored
  for kwargs in ({"prompt": "q: "}, {"normalize": False}, {"batch_size": 16}):
    model_rows.clear()
    enc.encode(texts, **kwargs)
    assert sum(model_rows) == len(texts), kwargs
  assert len(list(cache.glob("*.emb"))) == 4
  model_rows.clear()
  config = folder / "config.json"
  os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
  changed = jaxsel.load_encoder(folder).with_embedding_cache(cache)
  np.testing.assert_array_equal(np.asarray(changed.encode(texts)), plain)
  assert sum(model_rows) == len(texts)  # the checkpoint changed: embedded again
  model_rows.clear()
  changed.params = jax.tree.map(lambda x: x * 2, changed.params)
  changed.encode(texts)
  assert sum(model_rows) == len(texts)  # other weights: never read from the cache
  with pytest.raises(ValueError, match="loaded from a checkpoint"):
    testing.tiny_encoder().with_embedding_cache(cache)


def test_weights_replaced_in_place_are_not_read_from_the_cache(backbone, tmp_path, model_rows):
  """Weights rewritten with the same size and modification time kept the stale entries (the
  identity was names, sizes and times); it now holds a digest of the weights as loaded."""
  _, _, src = backbone
  folder = tmp_path / "ckpt"
  shutil.copytree(src, folder)
  texts, cache = _long_texts(), tmp_path / "emb"
  stale = np.asarray(jaxsel.load_encoder(folder).with_embedding_cache(cache).encode(texts))
  weights = folder / "model.safetensors"
  before = weights.stat()
  raw = weights.read_bytes()  # every float32 weight doubled; the header (and size) kept
  start = 8 + int.from_bytes(raw[:8], "little")
  header = json.loads(raw[8:start])
  assert {t["dtype"] for k, t in header.items() if k != "__metadata__"} == {"F32"}
  weights.write_bytes(raw[:start] + (np.frombuffer(raw[start:], "<f4") * 2).tobytes())
  os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
  assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (before.st_size,
                                                                  before.st_mtime_ns)
  model_rows.clear()
  fresh = np.asarray(jaxsel.load_encoder(folder).with_embedding_cache(cache).encode(texts))
  assert sum(model_rows) == len(texts)  # embedded again, not read back
  np.testing.assert_array_equal(fresh, np.asarray(jaxsel.load_encoder(folder).encode(texts)))
  assert not np.array_equal(fresh, stale)


def test_damaged_embedding_cache_entries_are_ignored_and_rewritten(backbone, tmp_path,
                                                                     model_rows):
  """A truncated, overwritten, bit-flipped or misshaped entry is a miss (the model runs and
  the result is right), and the run writes a good entry over it; an unwritable folder stores
  nothing and fails nothing."""
  _, _, folder = backbone
  texts, cache = _long_texts(), tmp_path / "emb"
  plain = np.asarray(jaxsel.load_encoder(folder).encode(texts))
  enc = jaxsel.load_encoder(folder).with_embedding_cache(cache)
  enc.encode(texts)
  (entry,) = cache.glob("*.emb")
  good = entry.read_bytes()
  flipped = bytearray(good)
  flipped[len(good) // 2] ^= 1
  header = len(store.MAGIC)
  other_shape = bytearray(good)
  other_shape[header:header + 16] = struct.pack("<QQ", len(texts) // 2, 2 * plain.shape[1])
  for damaged in (good[:len(good) // 2], b"\0" * len(good), bytes(flipped), bytes(other_shape),
                  b""):
    entry.write_bytes(damaged)
    model_rows.clear()
    np.testing.assert_array_equal(np.asarray(enc.encode(texts)), plain)
    assert sum(model_rows) == len(texts)
    assert entry.read_bytes() == good  # rewritten
  model_rows.clear()
  np.testing.assert_array_equal(np.asarray(enc.encode(texts)), plain)
  assert model_rows == []
  blocked = tmp_path / "a file"
  blocked.write_text("not a folder")
  np.testing.assert_array_equal(
      np.asarray(jaxsel.load_encoder(folder).with_embedding_cache(blocked / "emb").encode(texts)),
      plain)
  assert blocked.read_text() == "not a folder"


def _keys(names):
  return {k: hashlib.sha256(k.encode()).hexdigest() for k in names}


def test_embedding_store_evicts_the_least_recently_used(tmp_path):
  s = store.EmbeddingStore(tmp_path / "s", max_bytes=3 * 1200)
  key = _keys("abcd")
  arrays = {k: np.full((2, 128), i, np.float32) for i, k in enumerate("abcd")}
  for k in "abc":
    assert s.write(key[k], arrays[k])
  past = time.time() - 100
  for i, k in enumerate("abc"):  # written in this order, long ago
    os.utime(s.path(key[k]), (past + i, past + i))
  np.testing.assert_array_equal(s.read(key["a"], (2, 128)), arrays["a"])  # "a" used again
  assert s.write(key["d"], arrays["d"])  # over the limit: "b", the least recently used, goes
  assert sorted(p.stem for p in (tmp_path / "s").glob("*.emb")) == sorted(key[k] for k in "acd")
  assert s.read(key["b"], (2, 128)) is None and s.read(key["a"], (2, 64)) is None
  assert not list((tmp_path / "s").glob(".tmp-*"))
  with pytest.raises(ValueError, match="64 lowercase hex digits"):
    s.path("../a")


def test_embedding_store_evicts_only_its_own_entries_and_never_waits_on_a_fifo(tmp_path):
  """A user's `vectors.emb` (or an entry-like name without the store's header) in the cache
  folder was deleted as the oldest entry; a FIFO at an entry's path hung `read`."""
  folder = tmp_path / "s"
  folder.mkdir()
  key = _keys("abf")
  theirs = {"vectors.emb": b"my vectors " * 200, key["b"] + ".emb": b"not an entry " * 200}
  for name, data in theirs.items():
    (folder / name).write_bytes(data)
    os.utime(folder / name, (1, 1))  # older than any entry
  os.mkfifo(folder / (key["f"] + ".emb"))
  s = store.EmbeddingStore(folder, max_bytes=1200)
  t0 = time.monotonic()
  got = []  # a FIFO is not an entry: never opened to wait for a writer (a daemon thread: no hang)
  reader = threading.Thread(target=lambda: got.append(s.read(key["f"], (2, 128))), daemon=True)
  reader.start()
  reader.join(timeout=2)
  assert got == [None]
  assert s.write(key["a"], np.ones((2, 128), np.float32))  # over the limit, counting theirs
  assert time.monotonic() - t0 < 2
  assert {n: (folder / n).read_bytes() for n in theirs} == theirs
  assert stat.S_ISFIFO(os.lstat(folder / (key["f"] + ".emb")).st_mode)
  assert s.write(key["f"], np.zeros((2, 128), np.float32))  # replaces the FIFO with an entry
  np.testing.assert_array_equal(s.read(key["f"], (2, 128)), np.zeros((2, 128), np.float32))

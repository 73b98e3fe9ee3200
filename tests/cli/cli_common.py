"""What the `jaxsel` command's test files share: the bundled document, running the command
in-process, and reading its one-line errors."""

import io
import json
from pathlib import Path

from jaxsel import cli

DATA = Path(__file__).resolve().parents[2] / "jaxsel" / "data"
DOC = (DATA / "hotpotqa_wiki.md").read_text("utf-8")
QUESTION = json.loads((DATA / "hotpotqa_questions.jsonl").read_text("utf-8").splitlines()[0])


def sections(*titles):
  parts = DOC.split("\n## ")
  return "\n\n".join("## " + p.strip() for p in parts if p.split("\n")[0] in titles)


def run(argv):
  out = io.StringIO()
  code = cli.main(argv, out=out)
  return code, out.getvalue()


def no_work(monkeypatch):
  """Makes loading the encoder fail the test: a bad option must be refused before any work."""
  def load(name):
    raise AssertionError("the encoder was loaded before the options were checked")
  monkeypatch.setattr(cli.common, "load_model", load)


def error(argv, code, capsys):
  got, out = run(argv)
  err = capsys.readouterr().err
  assert got == code, (argv, err)
  assert not out and "Traceback" not in err
  last = err.strip().splitlines()[-1]
  assert last.startswith("jaxsel"), err
  return last


def smollm2_tokenizer_path() -> str:
  from jaxsel._src.generation import smollm2_gguf_path
  return str(smollm2_gguf_path())

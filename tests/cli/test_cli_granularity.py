"""`jaxsel select --granularity sentence`: passages sent whole or as runs of their sentences,
spans in the file, within the budget; a bad value is refused."""

import io
import json
from pathlib import Path

from jaxsel import cli

DOC = (Path(__file__).resolve().parents[2] / "jaxsel" / "data" / "hotpotqa_wiki.md").read_text("utf-8")


def test_select_granularity_sentence(tmp_path):
  f = tmp_path / "doc.md"
  f.write_text(DOC[:3000], "utf-8")
  argv = ["select", str(f), "--query", "Who played Corliss Archer?", "--budget", "80", "--json",
          "--quiet", "--method", "naive", "--granularity"]
  out = io.StringIO()
  assert cli.main(argv + ["sentence"], out=out) == 0
  d = json.loads(out.getvalue())
  assert d["granularity"] == "sentence" and d["selected"] and d["cost"] <= 80
  for s in d["selected"]:
    assert DOC[s["start"]:s["end"]] == s["text"] and "prefix" in s
  assert cli.main(argv + ["paragraph"], out=io.StringIO()) != 0

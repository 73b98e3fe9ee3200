"""`jaxsel select --max-per-doc N`: at most N passages from each file."""

import collections
import io
import json
from pathlib import Path

from jaxsel import cli

DOC = (Path(__file__).resolve().parents[2] / "jaxsel" / "data" / "hotpotqa_wiki.md").read_text("utf-8")


def test_max_per_doc_caps_each_file(tmp_path):
  parts = DOC.split("\n## ")[1:5]
  files = []
  for i, part in enumerate(parts):
    f = tmp_path / f"doc{i}.md"
    f.write_text("## " + part, "utf-8")
    files.append(str(f))
  argv = ["select", *files, "--query", "Who played Corliss Archer?", "--budget", "400", "--json",
          "--quiet", "--method", "facility_location", "--unit", "sentence"]
  out = io.StringIO()
  assert cli.main(argv + ["--max-per-doc", "1"], out=out) == 0
  capped = collections.Counter(s["source"] for s in json.loads(out.getvalue())["selected"])
  assert capped and max(capped.values()) == 1
  out = io.StringIO()
  assert cli.main(argv, out=out) == 0
  free = collections.Counter(s["source"] for s in json.loads(out.getvalue())["selected"])
  assert max(free.values()) > 1  # the cap did something
  assert cli.main(argv + ["--max-per-doc", "0"], out=io.StringIO()) != 0

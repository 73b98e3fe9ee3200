import pytest

import doubles
from cli_common import sections


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d = tmp_path_factory.mktemp("docs")
  (d / "corpus").mkdir()
  a = d / "corpus" / "temple.md"
  a.write_text(sections("Shirley Temple", "Kiss and Tell (1945 film)", "Janet Waldo"), "utf-8")
  b = d / "corpus" / "kansas.txt"
  b.write_text(sections("Kansas Song", "Lord High Treasurer"), "utf-8")
  (d / "empty.txt").write_text("  \n\n ", "utf-8")
  return d


@pytest.fixture
def chat_server():
  """The local OpenAI-compatible stub (tests/doubles.py), answering "stub answer"."""
  with doubles.chat_server() as (server, root):
    yield server, root + "/fixed/v1"

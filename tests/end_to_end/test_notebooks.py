"""Every notebook in notebooks/ executes top to bottom (small inputs, the real encoder)."""

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_there():
  assert {p.stem for p in NOTEBOOKS} >= {"text_selection", "passage_reranking", "corag",
                                         "framework_adapters"}


def _install_cell(path):
  nb = nbformat.read(path, as_version=4)
  return nb.cells[[c.cell_type for c in nb.cells].index("code")].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_install_cell_installs_what_this_repository_builds(path, tmp_path, monkeypatch):
  """From a checkout, the first cell installs the checkout itself; next to a `make dist`
  wheel, that wheel; elsewhere the package name (no guessed repository URL)."""
  cell = _install_cell(path)
  assert "github.com" not in cell
  ns = {}
  exec(cell.split("if importlib.util.find_spec")[0], ns)  # the definitions, not the install
  monkeypatch.delenv("JAXSEL_SOURCE", raising=False)
  monkeypatch.chdir(path.parent)
  assert ns["jaxsel_source"]() == str(path.parent.parent)
  monkeypatch.chdir(tmp_path)
  assert ns["jaxsel_source"]() == "jaxsel"
  (tmp_path / "dist").mkdir()
  (tmp_path / "dist" / "jaxsel-0.2.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
  assert ns["jaxsel_source"]() == "dist/jaxsel-0.2.0-cp311-cp311-linux_x86_64.whl"
  monkeypatch.setenv("JAXSEL_SOURCE", "/somewhere/jaxsel")
  assert ns["jaxsel_source"]() == "/somewhere/jaxsel"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_with_their_outputs(path):
  """They read with tables and plots on the web and in Colab (`make notebooks`): every code
  cell after the install cell ran, in order, without error, and at least one plot is there."""
  nb = nbformat.read(path, as_version=4)
  code = [c for c in nb.cells if c.cell_type == "code"][1:]
  assert [c.execution_count for c in code] == list(range(2, len(code) + 2)), "run `make notebooks`"
  outputs = [o for c in code for o in c.outputs]
  assert all(c.outputs for c in code)
  assert not [o for o in outputs if o.output_type == "error"]
  assert any("image/png" in o.get("data", {}) for o in outputs)
  assert not any("/work/" in str(o) or "site-packages" in str(o) for o in outputs)  # no machine paths


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
  """A kernelspec that runs this interpreter (the one with jaxsel installed)."""
  from jupyter_client.kernelspec import KernelSpecManager
  d = tmp_path_factory.mktemp("kernels")
  spec = d / "kernels" / "jaxsel-test"
  spec.mkdir(parents=True)
  (spec / "kernel.json").write_text(json.dumps({
      "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
      "display_name": "jaxsel test", "language": "python"}))
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("JUPYTER_PATH", str(d) + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
    assert "jaxsel-test" in KernelSpecManager().find_kernel_specs()
    yield "jaxsel-test"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, kernel_name, monkeypatch):
  monkeypatch.setenv("JAXSEL_NOTEBOOK_SMALL", "1")
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.delenv("MPLBACKEND", raising=False)  # the inline backend records the plots
  nb = nbformat.read(path, as_version=4)
  first = nb.cells[[c.cell_type for c in nb.cells].index("code")].source
  assert "find_spec(\"jaxsel\")" in first and "pip" in first  # Colab install cell comes first
  NotebookClient(nb, timeout=600, kernel_name=kernel_name,
                 resources={"metadata": {"path": str(path.parent)}}).execute()
  if os.environ.get("JAXSEL_NOTEBOOK_OUT"):  # keep the executed copy for inspection
    nbformat.write(nb, Path(os.environ["JAXSEL_NOTEBOOK_OUT"]) / path.name)
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
             for o in outputs), "expected at least one plot"

"""Executes notebooks in place, outputs kept (what `make notebooks` runs), so that they read
with their tables and plots on the web and in Colab without running anything.

    python notebooks/execute.py notebooks/*.ipynb
"""

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def _machine_noise(output) -> bool:
  """tqdm's warning that this kernel has no ipywidgets (Colab has them): it names this
  machine's paths and says nothing about the notebook."""
  text = "".join(output.get("text", "")) if output.get("output_type") == "stream" else ""
  lines = [x for x in text.splitlines() if x.strip()]
  return bool(lines) and "TqdmWarning: IProgress not found" in lines[0] and all(
      "TqdmWarning" in x or "notebook_tqdm" in x for x in lines)


def execute(path: Path, timeout: int) -> None:
  nb = nbformat.read(path, as_version=4)
  NotebookClient(nb, timeout=timeout, kernel_name="python3",
                 resources={"metadata": {"path": str(path.parent)}}).execute()
  for cell in nb.cells:
    if cell.cell_type == "code":
      cell.outputs = [o for o in cell.outputs if not _machine_noise(o)]
  tmp = path.with_suffix(".ipynb.tmp")
  nbformat.write(nb, tmp)
  os.replace(tmp, path)  # atomic: a failed run leaves the notebook as it was


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("notebooks", nargs="+", type=Path)
  p.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
  args = p.parse_args(argv)
  os.environ.pop("JAXSEL_NOTEBOOK_SMALL", None)  # the full inputs
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  for path in args.notebooks:
    print(f"executing {path}", file=sys.stderr)
    execute(path, args.timeout)
  return 0


if __name__ == "__main__":
  sys.exit(main())

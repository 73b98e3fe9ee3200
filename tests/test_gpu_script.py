"""bench/gpu.sh keeps working as the code moves: the tests and benchmarks it names exist, the
options of its GPU run are ones the benchmarks accept, and its `--dry-run` (the same steps on
the CPU, tiny sizes) finishes every step."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu.sh"


def _script() -> str:
  return SCRIPT.read_text("utf-8").replace("\\\n", " ")  # continued lines joined


def _bench_steps() -> list:
  """(name, bench script, its arguments) of every `step NAME LIMIT "$PY" bench/X.py ...`."""
  out = []
  for line in _script().splitlines():
    m = re.match(r'\s*step (\S+) \d+ "\$PY" (bench/\S+\.py)(.*)$', line)
    if m:
      out.append((m.group(1), m.group(2), shlex.split(m.group(3))))
  return out


def test_the_script_names_only_files_that_exist():
  named = set(re.findall(r"\b((?:tests|bench)/[\w/]+\.py)\b", _script()))
  assert {"bench/greedy.py", "tests/test_greedy.py"} <= named  # the parsing found them
  missing = sorted(p for p in named if not (ROOT / p).is_file())
  assert not missing, f"bench/gpu.sh names files that moved: {missing}"
  steps = _bench_steps()
  assert {name for name, _, _ in steps} == {"greedy", "search", "scale", "encoders"}
  assert len(steps) == 8  # each bench once for the GPU and once for --dry-run


@pytest.mark.slow
def test_the_gpu_run_passes_options_the_benchmarks_accept(tmp_path):
  """Each benchmark's command line of the GPU run, with `--help` after it: argparse checks the
  values before `--help` and stops there; every option must be one the help lists."""
  for name, bench, args in _bench_steps():
    args = [a.replace("$OUT_DIR", str(tmp_path)) for a in args]
    r = subprocess.run([sys.executable, bench, *args, "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, (name, args, r.stderr[-2000:])
    unknown = [a for a in args if a.startswith("--") and a not in r.stdout]
    assert not unknown, f"{bench} does not accept {unknown}"
  # The GPU run's test files collect (a moved module would fail there, on the GPU, first).
  gpu_tests = re.findall(r"^\s*TESTS=\(([^)]*)\)", _script(), re.M)[-1].split()
  assert gpu_tests and all(t.startswith("tests/") for t in gpu_tests), gpu_tests
  r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                      "-p", "no:cacheprovider", *gpu_tests], cwd=ROOT, capture_output=True,
                     text=True, timeout=600)
  assert r.returncode == 0, r.stdout[-3000:]


@pytest.mark.slow
def test_dry_run_finishes_every_step(tmp_path):
  r = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=ROOT, capture_output=True,
                     text=True, timeout=3000,
                     env={**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)})
  assert r.returncode == 0, r.stderr[-3000:]
  steps = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()]
  assert [s[0] for s in steps] == ["environment", "tests", "greedy", "search", "scale", "encoders"]
  failed = {f"{name} (exit status {rc}, {seconds} s)":
            (tmp_path / f"{name}.log").read_text(errors="replace")[-1500:]
            for name, rc, seconds in steps if rc != "0"}
  assert not failed, failed
  report = (tmp_path / "report.md").read_text()
  assert "| greedy: " in report and "backend cpu" in (tmp_path / "environment.log").read_text()

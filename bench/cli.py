"""Start-up of the `jaxsel` command: wall time of whole processes, with and without JAX's
persistent compilation cache.

Rows (each a fresh process on the bundled document, `jaxsel/data/hotpotqa_wiki.md`):

* `import jaxsel.cli`: the floor, a process that only imports the command;
* `select`, cache off: `--no-compile-cache`, every program compiled (what every process paid
  before the cache);
* `select`, first process: an empty cache folder, filled by this process;
* `select`, second process: the same folder, every program read from it;
* `ask` (second process): `jaxsel ask` with the offline SmolLM2 on a warm cache, and its own
  `--json` timings: loading the answer model, selecting, generating.

Each `select` row is repeated (`--repeats`, a fresh cache folder for every first process);
the table gives the median and the range. Run from the repository root:

    .venv/bin/python bench/cli.py [--repeats 3] [--no-ask]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENT = ROOT / "jaxsel" / "data" / "hotpotqa_wiki.md"
QUESTION = ("What government position was held by the woman who portrayed Corliss Archer in "
            "the film Kiss and Tell?")


def command() -> list:
  exe = shutil.which("jaxsel", path=str(Path(sys.executable).parent))
  return [exe] if exe else [sys.executable, "-m", "jaxsel.cli"]


def timed(argv: list, env: dict) -> tuple:
  """(seconds, stdout) of one process; fails loudly if it fails."""
  t0 = time.perf_counter()
  r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
  seconds = time.perf_counter() - t0
  if r.returncode != 0:
    raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
  return seconds, r.stdout


def entries(folder: Path) -> int:
  return len(list(folder.glob("*-cache"))) if folder.exists() else 0


def summary(values: list) -> str:
  if len(values) == 1:
    return f"{values[0]:.1f}"
  return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--no-ask", action="store_true", help="skip the `jaxsel ask` row")
  args = p.parse_args(argv)

  base_env = {k: v for k, v in os.environ.items() if k != "JAXSEL_COMPILE_CACHE"}
  select = command() + ["select", str(DOCUMENT), "-q", QUESTION, "--budget", "256", "--quiet"]
  rows = []
  work = Path(tempfile.mkdtemp(prefix="jaxsel-bench-cli-"))
  try:
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
          file=sys.stderr)
    floor = [timed([sys.executable, "-c", "import jaxsel.cli"], base_env)[0]
             for _ in range(args.repeats)]
    rows.append(("`import jaxsel.cli` only", summary(floor), "—"))
    off = [timed(select + ["--no-compile-cache"], base_env)[0] for _ in range(args.repeats)]
    rows.append(("`jaxsel select`, cache off (`--no-compile-cache`)", summary(off), "—"))
    first, second, written = [], [], []
    for i in range(args.repeats):
      env = {**base_env, "XDG_CACHE_HOME": str(work / f"xdg{i}")}
      folder = work / f"xdg{i}" / "jaxsel" / "jax"
      first.append(timed(select, env)[0])
      written.append(entries(folder))
      second.append(timed(select, env)[0])
      if entries(folder) != written[-1]:
        print("warning: the second process wrote new cache entries", file=sys.stderr)
    size = sum(f.stat().st_size for f in (work / "xdg0").rglob("*-cache")) / 2**20
    rows.append(("`jaxsel select`, first process (empty cache)", summary(first),
                 f"{written[0]} programs written ({size:.1f} MiB)"))
    rows.append(("`jaxsel select`, second process (warm cache)", summary(second),
                 "0 programs compiled"))
    if not args.no_ask:
      env = {**base_env, "XDG_CACHE_HOME": str(work / "xdg0")}
      ask = command() + ["ask", QUESTION, str(DOCUMENT), "--budget", "256", "--quiet", "--json"]
      seconds, out = timed(ask, env)
      t = json.loads(out)["timings"]
      rows.append(("`jaxsel ask` (offline SmolLM2, warm cache)", f"{seconds:.1f}",
                   f"load model {t['load_generator']:.1f} s, select {t['select']:.1f} s, "
                   f"generate {t['generate']:.1f} s"))
  finally:
    shutil.rmtree(work, ignore_errors=True)

  print(f"| process (bundled document, budget 256) | wall s, median (range of {args.repeats}) "
        "| notes |")
  print("|---|---:|---|")
  for name, value, note in rows:
    print(f"| {name} | {value} | {note} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())

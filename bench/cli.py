"""Start-up of the `jaxsel` command: wall time of whole processes, with and without its
caches (JAX's persistent compilation cache, and the passage embeddings of its input files).

Rows (each a fresh process on the bundled document, `jaxsel/data/hotpotqa_wiki.md`):

* `import jax`, `import jaxsel`, `import jaxsel.cli`: processes that only import (`import
  jaxsel` loads each public name on first use, so it should cost no more than `import jax`);
* `jaxsel select` of a missing file: the one-line error, reported before JAX loads;
* `select`, caches off: `--no-compile-cache --no-embedding-cache`, every program compiled
  and every passage embedded (what every process paid before the caches);
* `select`, first process: empty cache folders, filled by this process;
* `select`, second process: the same folders, every program read from them and the
  passages' embeddings too (the model runs on the query alone);
* `select`, second process without the embedding cache (`--no-embedding-cache`): programs
  read back, passages embedded again;
* `ask` (second process): `jaxsel ask` with the offline SmolLM2 on a warm cache, and its own
  `--json` timings: loading the answer model, selecting, generating.

Each `select` row is repeated (`--repeats`, a fresh cache folder for every first process);
the table gives the median and the range of the wall time, and the median CPU time (user +
system) of the process, which other jobs on a shared machine inflate much less than the wall
time. Run from the repository root:

    .venv/bin/python bench/cli.py [--repeats 3] [--no-ask]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def _children_cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def timed(argv: list, env: dict, *, status: int = 0) -> tuple:
  """(wall seconds, CPU seconds, stdout) of one process; fails loudly unless it exits with
  `status`."""
  cpu0, t0 = _children_cpu(), time.perf_counter()
  r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
  seconds, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
  if r.returncode != status:
    raise SystemExit(f"{' '.join(argv)} exited with {r.returncode}, not {status}:\n"
                     f"{r.stderr[-2000:]}")
  return seconds, cpu, r.stdout


def entries(folder: Path) -> int:
  return len(list(folder.glob("*-cache"))) if folder.exists() else 0


def summary(values: list) -> str:
  if len(values) == 1:
    return f"{values[0]:.1f}"
  return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def row(name: str, runs: list, note: str = "—") -> tuple:
  """A table row from (wall, CPU, ...) runs: wall median (range), CPU median, note."""
  return (name, summary([r[0] for r in runs]), f"{statistics.median(r[1] for r in runs):.1f}",
          note)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--no-ask", action="store_true", help="skip the `jaxsel ask` row")
  args = p.parse_args(argv)

  base_env = {k: v for k, v in os.environ.items()
              if k not in ("JAXSEL_COMPILE_CACHE", "JAXSEL_EMBEDDING_CACHE")}
  select = command() + ["select", str(DOCUMENT), "-q", QUESTION, "--budget", "256", "--quiet"]
  rows = []
  work = Path(tempfile.mkdtemp(prefix="jaxsel-bench-cli-"))
  try:
    load = [os.getloadavg()[0]]
    print(f"load average at start: {load[0]:.1f} on {os.cpu_count()} cores", file=sys.stderr)
    for module in ("jax", "jaxsel", "jaxsel.cli"):
      runs = [timed([sys.executable, "-c", f"import {module}"], base_env)
              for _ in range(args.repeats)]
      rows.append(row(f"`import {module}` only", runs))
    missing = command() + ["select", str(work / "missing.md"), "-q", QUESTION]
    rows.append(row("`jaxsel select` of a missing file (the error)",
                    [timed(missing, base_env, status=1) for _ in range(args.repeats)],
                    "one line on stderr, exit status 1"))
    off = [timed(select + ["--no-compile-cache", "--no-embedding-cache"],
                 {**base_env, "XDG_CACHE_HOME": str(work / "unused")})
           for _ in range(args.repeats)]
    rows.append(row("`jaxsel select`, caches off (`--no-compile-cache --no-embedding-cache`)",
                    off))
    first, second, no_embeddings, written = [], [], [], []
    for i in range(args.repeats):
      env = {**base_env, "XDG_CACHE_HOME": str(work / f"xdg{i}")}
      folder = work / f"xdg{i}" / "jaxsel" / "jax"
      first.append(timed(select, env))
      written.append(entries(folder))
      second.append(timed(select, env))
      no_embeddings.append(timed(select + ["--no-embedding-cache"], env))
      if entries(folder) != written[-1]:
        print("warning: a later process wrote new cache entries", file=sys.stderr)
    size = sum(f.stat().st_size for f in (work / "xdg0").rglob("*-cache")) / 2**20
    stored = list((work / "xdg0" / "jaxsel" / "embeddings").glob("*.emb"))
    rows.append(row("`jaxsel select`, first process (empty caches)", first,
                    f"{written[0]} programs written ({size:.1f} MiB), {len(stored)} embedding "
                    f"entry ({sum(f.stat().st_size for f in stored) / 2**10:.0f} KiB)"))
    rows.append(row("`jaxsel select`, second process (warm caches)", second,
                    "0 programs compiled, the query embedded"))
    rows.append(row("`jaxsel select`, second process, `--no-embedding-cache`", no_embeddings,
                    "0 programs compiled, every passage embedded"))
    if not args.no_ask:
      env = {**base_env, "XDG_CACHE_HOME": str(work / "xdg0")}
      ask = command() + ["ask", QUESTION, str(DOCUMENT), "--budget", "256", "--quiet", "--json"]
      seconds, cpu, out = timed(ask, env)
      t = json.loads(out)["timings"]
      rows.append(("`jaxsel ask` (offline SmolLM2, warm cache)", f"{seconds:.1f}", f"{cpu:.1f}",
                   f"load model {t['load_generator']:.1f} s, select {t['select']:.1f} s, "
                   f"generate {t['generate']:.1f} s"))
    load.append(os.getloadavg()[0])
  finally:
    shutil.rmtree(work, ignore_errors=True)

  print(f"| process (bundled document, budget 256) | wall s, median (range of {args.repeats}) "
        "| CPU s, median | notes |")
  print("|---|---:|---:|---|")
  for name, value, cpu, note in rows:
    print(f"| {name} | {value} | {cpu} | {note} |")
  print(f"\nload average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end, on "
        f"{os.cpu_count()} cores")
  return 0


if __name__ == "__main__":
  sys.exit(main())

"""What `Pipeline(enc).select(question, documents, budget=200)` costs against the request's
size: peak memory over the loaded encoder and time, per method and granularity, with the
fitted growth exponent of each (the slope of log cost against log N).

Each (method, granularity, N) runs in its own process, which loads the encoder, embeds the
request (first call: embedding, text signals, compilation) and repeats it (repeat: the
embeddings and text signals come from the cache; what a server pays for a request of a seen
shape). N counts candidates: N short documents at ``passage``, N/5 documents of 5 sentences
at ``sentence``. Peak memory is `ru_maxrss` after the two calls less its value once the
encoder is loaded. `--titled`: each document a `{"text", "title"}` record through
`Pipeline.pick`, as `jaxsel serve` and the framework adapters send titled documents (a part that
does not hold its title is embedded, counted and sent after it).

  python bench/select_size.py                                   # every method, both granularities
  python bench/select_size.py --methods corag --sizes 50,1000   # one method
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

METHODS = ("corag", "naive", "mmr", "coverage", "facility_location", "saturated_coverage")
SIZES = (50, 100, 250, 500, 1000, 2000)
WORDS = ("river city bridge film actor director born war king paris seine music album band "
         "school novel painter village castle station island museum league season").split()
QUESTION = "Which river flows through the city where the painter was born?"


def documents(n: int, granularity: str, seed: int = 0) -> list:
  """N candidates' worth of short synthetic documents (seeded)."""
  rng = np.random.default_rng(seed)

  def sentence(i):
    return f"{' '.join(rng.choice(WORDS, 10)).capitalize()} {i}."

  if granularity == "sentence":
    return [" ".join(sentence(5 * d + s) for s in range(5)) for d in range(max(n // 5, 1))]
  return [f"Document {d}: {sentence(d)}" for d in range(n)]


def one(method: str, granularity: str, n: int, titled: bool = False) -> dict:
  """Measured in this process (see the module docstring)."""
  import resource

  import jaxsel
  enc = jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")
  pipe = jaxsel.Pipeline(enc, method=method)
  docs = documents(n, granularity)
  call = pipe.select
  if titled:
    docs = [{"text": d, "title": f"Article {i}"} for i, d in enumerate(docs)]
    call = pipe.pick
  query = None if method == "coverage" else QUESTION
  base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  t0 = time.perf_counter()
  call(query, docs, budget=200, granularity=granularity)
  t1 = time.perf_counter()
  res = call(query, docs, budget=200, granularity=granularity)
  t2 = time.perf_counter()
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return {"method": method, "granularity": granularity, "n": n, "titled": titled, "first_s": t1 - t0,
          "repeat_s": t2 - t1, "peak_mb": (peak - base) / 1024, "picks": len(res.indices),
          "cost": res.cost}


def slope(ns, ys) -> float:
  """The least-squares exponent b of y ≈ a·N^b (over the sizes from 250 on, where fixed costs
  no longer dominate; all of them when fewer than 3 are that large)."""
  ns, ys = np.asarray(ns, float), np.maximum(np.asarray(ys, float), 1e-6)
  keep = ns >= 250 if (ns >= 250).sum() >= 3 else np.ones(len(ns), bool)
  return float(np.polyfit(np.log(ns[keep]), np.log(ys[keep]), 1)[0])


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--methods", default=",".join(METHODS))
  ap.add_argument("--granularities", default="passage,sentence")
  ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
  ap.add_argument("--titled", action="store_true",
                  help="titled records through Pipeline.pick (as the server and adapters send)")
  ap.add_argument("--one", help=argparse.SUPPRESS)
  ap.add_argument("--out", help="also write the rows as JSON here")
  args = ap.parse_args(argv)
  if args.one:
    m, g, n, t = args.one.split(":")
    print(json.dumps(one(m, g, int(n), t == "titled")))
    return
  sizes = [int(x) for x in args.sizes.split(",")]
  print(f"# {time.strftime('%Y-%m-%d %H:%M')} · {platform.processor() or platform.machine()} · "
        f"{os.cpu_count()} cores · load {os.getloadavg()[0]:.1f} at start")
  rows = []
  print("| method | granularity | " + " | ".join(f"N = {n:,}" for n in sizes)
        + " | growth exponent: memory / time |")
  print("|---|---|" + "---|" * len(sizes) + "---|")
  for g in args.granularities.split(","):
    for m in args.methods.split(","):
      got = []
      for n in sizes:
        form = "titled" if args.titled else "plain"
        p = subprocess.run([sys.executable, __file__, "--one", f"{m}:{g}:{n}:{form}"],
                           capture_output=True, text=True)
        if p.returncode:
          got.append({"method": m, "granularity": g, "n": n, "error": p.stderr.strip()[-300:]})
        else:
          got.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(json.dumps(got[-1]), file=sys.stderr, flush=True)
      rows += got
      ok = [r for r in got if "error" not in r]
      cells = " | ".join(
          f"{r['peak_mb']:.0f} MB, {r['repeat_s']:.2f} s" if "error" not in r else "error"
          for r in got)
      exps = ("" if len(ok) < 3 else
              f"{slope([r['n'] for r in ok], [r['peak_mb'] for r in ok]):.1f} / "
              f"{slope([r['n'] for r in ok], [r['repeat_s'] for r in ok]):.1f}")
      print(f"| {m} | {g} | {cells} | {exps} |", flush=True)
  print(f"# load {os.getloadavg()[0]:.1f} at the end")
  if args.out:
    with open(args.out, "w") as f:
      json.dump(rows, f, indent=1)


if __name__ == "__main__":
  main()

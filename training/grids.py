"""The quality commands as grids of one runner (`training/runner.py`): each command declares its
sets, forms, budgets and configurations here, `runner.run` evaluates and stores them, and the
command's report (`training/reports.py`, `training/agent_menu.py`) prints the tables of
training/RESULTS.md.

    python -m training granularity --limit 100 \\
        --weights 2wiki=out/gran/no_2wiki.safetensors,musique=out/gran/no_musique.safetensors
    python -m training forms --batched --sets hotpot_test,musique,2wiki --forms titled,untitled
    python -m training defaults --sets hotpot_test --limit 20
    python -m training agent-menu --limit 100 --weights ...

Every command takes ``--sets``, ``--forms``, ``--budgets``, ``--configs`` (a probe: only these;
without the ones its report needs, the means are printed), ``--limit`` (N, or SET=N,...),
``--weights`` (SET=path,...: learned weights trained without SET), ``--cache`` (embeddings),
``--store`` (the stored runs, resumable), ``--out`` (the report's JSON) and ``--batched``
(each cell's questions through one `Pipeline.select_many`, the same picks as `select`). A set
may be a JSONL file's path (`qa_sets.is_file`): a set kept outside the project.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

import numpy as np

import jaxsel
from jaxsel.contrib import hop_scorer as hops
from training import agent_menu, hop_features, reports, runner
from training.files import atomic_savez, atomic_write, file_sha256
from training.runner import BUDGETS, FORMS, Config, Grid

GRAN_CACHE = os.path.join(runner.ROOT, "out", "gran")

# Whole paragraphs or their sentences at one budget: NaiveRAG and the default for a question
# (CORAG, `learned_hops`) over paragraphs and sentences, and the default as users call it.
GRANULARITY = Grid(
    command="granularity", sets=("hotpot_hard", "2wiki", "musique", "hotpot_test"), forms=FORMS,
    budgets=BUDGETS, metrics=runner.span_metrics, cache=GRAN_CACHE, configs=(
        Config("naive_p", "NaiveRAG, paragraphs", {"method": "naive"}, "passage"),
        Config("naive_s", "NaiveRAG, sentences", {"method": "naive"}, "sentence"),
        Config("default_p", "default, paragraphs", {}, "passage"),
        Config("default_s", "default, sentence granularity", {}, "sentence"),
        Config("default", "default, no granularity named", {}, None)))

# Candidate forms: NaiveRAG and CORAG's scorers, strict joint recall against the gold paragraphs.
FORMS_GRID = Grid(
    command="forms", sets=("hotpot_test", "musique", "2wiki"), forms=FORMS, budgets=BUDGETS,
    metrics=runner.piece_metrics, cache=hop_features.CACHE, configs=(
        Config("naive", "NaiveRAG", {"method": "naive"}, "passage"),
        Config("bridge", "CORAG `bridge`", {"method": "corag", "corag_scorer": "bridge"},
               "passage"),
        Config("hops", "CORAG `hops` (untrained)", {"method": "corag", "corag_scorer": "hops"},
               "passage"),
        Config("learned_hops", "CORAG `learned_hops` (default)",
               {"method": "corag", "corag_scorer": "learned_hops"}, "passage")))

# The configuration agent's menu (granularity x scorer x iterations); the first is the default.
AGENT_MENU = Grid(
    command="agent-menu", sets=("hotpot_hard", "musique", "2wiki", "hotpot_test"),
    forms=("titled", "untitled"), budgets=BUDGETS, metrics=runner.span_metrics, cache=GRAN_CACHE,
    configs=tuple(Config(name, name.replace("/", ", "),
                         {"method": "corag", "corag_scorer": s, "iterations": it}, g)
                  for name, (g, s, it) in zip(agent_menu.NAMES, agent_menu.MENU)))


# ----------------------------------------------------------------------------- adapters


def _span(i: int, meta: dict, texts: list, sent: str) -> tuple:
  """`(index, start, end, sent)` of a kept document: a part of `texts[i]` when the adapter sent
  one (``"jaxsel_start"`` / ``"jaxsel_end"`` in its metadata; `sent` is then what it returned,
  its heading included), else the whole."""
  if "jaxsel_start" in meta:
    return i, int(meta["jaxsel_start"]), int(meta["jaxsel_end"]), sent
  return i, 0, len(texts[i]), texts[i]


def adapter(name: str, encoder, budget: int, tokenizer=None, **settings):
  """`(question, texts, titles) -> picked (index, start, end, sent)` through the framework
  adapter `name`, built with only an encoder and a budget (and `tokenizer` when given): a
  document kept whole, or the part of it the adapter sent (granularity "auto" cuts sentences
  under a tight budget; `sent` is the part with its heading). LangChain's and Haystack's
  documents carry their `titles` (None each for untitled ones) in their metadata under
  ``"title"``, the key those adapters read by default; LlamaIndex's nodes carry none (LlamaIndex
  would send metadata with every node; its adapter reads no title by default). `settings`: more
  of the adapter's arguments (e.g. ``title_key=None``)."""
  extra = {**settings, **({} if tokenizer is None else {"tokenizer": tokenizer})}

  def meta(i, titles):
    return {"i": i} if titles is None or titles[i] is None else {"i": i, "title": titles[i]}

  if name == "langchain":
    from langchain_core.documents import Document
    from jaxsel.integrations.langchain import JaxselCompressor
    comp = JaxselCompressor(encoder=encoder, budget=budget, **extra)
    return lambda q, texts, titles=None: [
        _span(d.metadata["i"], d.metadata, texts, d.page_content) for d in comp.compress_documents(
            [Document(page_content=t, metadata=meta(i, titles)) for i, t in enumerate(texts)], q)]
  if name == "llama_index":
    from llama_index.core.schema import NodeWithScore, TextNode
    from jaxsel.integrations.llama_index import JaxselNodePostprocessor
    post = JaxselNodePostprocessor(encoder=encoder, budget=budget, **extra)
    # The index from the node id ("3", or "3#start-end" for a part): metadata would be embedded.
    return lambda q, texts, titles=None: [
        _span(int(n.node.id_.split("#")[0]), n.node.metadata, texts, n.node.get_content())
        for n in post.postprocess_nodes(
            [NodeWithScore(node=TextNode(text=t, id_=str(i))) for i, t in enumerate(texts)],
            query_str=q)]
  if name == "haystack":
    from haystack import Document
    from jaxsel.integrations.haystack import JaxselRanker
    ranker = JaxselRanker(encoder=encoder, budget=budget, **extra)
    return lambda q, texts, titles=None: [
        _span(d.meta["i"], d.meta, texts, d.content) for d in ranker.run(
            query=q, documents=[Document(content=t, id=str(i), meta=meta(i, titles))
                                for i, t in enumerate(texts)])["documents"]]
  raise ValueError(f"unknown adapter {name!r}")


def adapter_select(name: str, **settings):
  """A `Config.select` of the framework adapter `name` (built with `settings` too): the pieces
  it kept of each question's paragraphs (with their titles, `adapter`), and whether they go over
  the budget in the encoder's count and, with the same adapter given SmolLM2's tokenizer (the
  offline GGUF file), in that tokenizer's: each piece counted as the adapter returned it,
  heading included."""

  def make(encoder):
    built = {}  # the second tokenizer and the adapters, once something is to be selected

    def fn(qs, budget):
      if not built:
        from jaxsel.cli import reader_tokenizer
        built.update(counter=jaxsel.token_counter(encoder), second=reader_tokenizer("smollm2"))
      counter, second = built["counter"], built["second"]
      if budget not in built:
        built[budget] = (adapter(name, encoder, budget, **settings),
                         adapter(name, encoder, budget, second, **settings))
      plain, checked = built[budget]
      out = []
      for q in qs:
        texts, titles = [p.text for p in q.passages], [p.title for p in q.passages]
        picks = plain(q.example.question, texts, titles)
        in_second = checked(q.example.question, texts, titles)
        sent = [s for *_, s in picks]
        costs = counter.count(sent) if sent else np.zeros(0)
        extra = {"over_encoder": float(costs.sum() > budget) if picks else 0.0,
                 "over_second": float(second.count([s for *_, s in in_second]).sum() > budget)
                 if in_second else 0.0}
        pieces = [dataclasses.replace(q.passages[i], text=texts[i][a:b], start=a, end=b,
                                      prefix=s[:len(s) - (b - a)], tokens=int(c))
                  for (i, a, b, s), c in zip(picks, costs)]
        out.append((pieces, "\n\n".join(sent), extra))
      return out

    return fn

  return make


ADAPTERS = {"langchain": "LangChain", "llama_index": "LlamaIndex", "haystack": "Haystack"}
# What users get without choosing a method: NaiveRAG, `Pipeline(enc)` and the adapters.
DEFAULTS = Grid(
    command="defaults", sets=("hotpot_test", "musique", "2wiki"), forms=hop_features.FORMS,
    budgets=(256,), metrics=runner.span_metrics, cache=hop_features.CACHE, configs=(
        Config("naive", "NaiveRAG, paragraphs", {"method": "naive"}, "passage"),
        Config("naive_auto", "NaiveRAG, default granularity", {"method": "naive"}),
        Config("pipeline", "`Pipeline(enc)`"),
        *(Config(a, label, select=adapter_select(a)) for a, label in ADAPTERS.items()),
        # A probe: the LangChain adapter without titles (`--configs langchain,langchain_no_titles`).
        Config("langchain_no_titles", "LangChain, `title_key=None`",
               select=adapter_select("langchain", title_key=None))))


# ----------------------------------------------------------------------------- the commands


def _pairs(text: str) -> dict:
  return dict(kv.split("=", 1) for kv in text.split(",") if kv)


def parser(grid: Grid, doc: str, *, limit=None, out: str) -> argparse.ArgumentParser:
  """The options every command shares (see the module docstring)."""
  p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sets", default=",".join(grid.sets))
  p.add_argument("--forms", default=",".join(grid.forms))
  p.add_argument("--budgets", "--budget", default=",".join(map(str, grid.budgets)))
  p.add_argument("--configs", "--methods", default=",".join(c.name for c in grid.configs),
                 help="a probe: only these configurations")
  p.add_argument("--limit", default=limit, help="N, or SET=N,...: the first questions of each set")
  p.add_argument("--weights", default="", help="SET=path,...: learned weights trained without SET")
  p.add_argument("--cache", default=grid.cache, help="embedding caches")
  p.add_argument("--store", default=runner.STORE, help="the stored runs (resumable)")
  p.add_argument("--out", default=out, help="the report (JSON)")
  p.add_argument("--batched", action="store_true",
                 help="each cell's questions in one `select_many` (the same picks as `select`)")
  return p


def grid_of(grid: Grid, args) -> Grid:
  return grid._replace(sets=tuple(args.sets.split(",")), forms=tuple(args.forms.split(",")),
                       budgets=tuple(int(b) for b in str(args.budgets).split(",")),
                       cache=args.cache).only(args.configs.split(","))


def limits_of(text) -> dict:
  """`--limit`: N (every set) or SET=N,... -> `{set or "*": N}`."""
  out = {}
  for kv in str(text or "").split(","):
    if kv:
      k, _, v = kv.rpartition("=")
      out[k or "*"] = int(v)
  return out


def evaluate(grid: Grid, args, *, weights=None) -> dict:
  base = jaxsel.load_encoder(hop_features.ENCODER)
  return runner.run(grid, base=base, limits=limits_of(args.limit), store=args.store,
                    weights=_pairs(args.weights) if weights is None else weights,
                    batched=args.batched)


def _write(path: str, report) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  atomic_write(path, json.dumps(report, indent=1, default=float).encode("utf-8"))


def _probe(grid: Grid, needed) -> bool:
  return not set(needed) <= {c.name for c in grid.configs}


def granularity(argv=None) -> int:
  """Whole paragraphs or their sentences, one budget (`GRANULARITY`; training/RESULTS.md,
  Granularity)."""
  p = parser(GRANULARITY, granularity.__doc__, limit="100",
             out=os.path.join(GRAN_CACHE, "granularity.json"))
  p.add_argument("--widening", type=float, default=0.0,
                 help="CORAG's progressive widening on requests of > 40 candidates (0: off)")
  args = p.parse_args(argv)
  grid = grid_of(GRANULARITY, args)._replace(settings={"widening": args.widening})
  results = evaluate(grid, args)
  if _probe(grid, reports.NAIVE + reports.DEFAULTS):
    print("\n".join(runner.means_lines(results)))
    return 0
  report = {k: {"n": r["n"], "over": r["over"], "weights": r["weights"], "widening": args.widening,
                "per_question": r["per_question"],
                "summary": reports.granularity_summary(r["per_question"], grid.budgets)}
            for k, r in results.items()}
  _write(args.out, report)
  print("\n".join(reports.granularity_markdown(report)))
  print(f"selections over their budget: {sum(r['over'] for r in report.values())}")
  return 0


REFERENCE = os.path.join(runner.ROOT, "tests", "data", "hop_scorer_reference.json")


def reference_record(name: str = "hotpot_test", form: str = "untitled", *, base, n: int = 8,
                     budget: int = 256) -> dict:
  """The shipped learned scorer's picks on the first `n` questions of `name` in `form`, with the
  questions' texts, so a test can recompute them offline with the real encoder
  (`tests/scorers/test_hops.py`): `pipe.select_many` with `corag_scorer="learned_hops"` (the
  default search settings and top-up), NaiveRAG beside it, strict joint recall of both."""
  examples = hop_features.load_examples(name, limit=n)
  inputs = [(ex.question, hop_features.paragraph_passages(ex, form, base.tokenizer)) for ex in examples]
  out = {"set": name, "form": form, "budget": budget, "encoder": hop_features.ENCODER,
         "weights_sha256": file_sha256(hops.WEIGHTS), "questions": []}
  configs = {c.name: c for c in FORMS_GRID.configs}
  pipes = {m: jaxsel.Pipeline(base, **configs[m].settings) for m in ("naive", "learned_hops")}
  picks = {m: [[ps.index(p) for p in r.passages] for (_, ps), r in
               zip(inputs, pipe.select_many(inputs, budget=budget, granularity="passage"))]
           for m, pipe in pipes.items()}
  for i, ex in enumerate(examples):
    out["questions"].append({"id": ex.id, "question": ex.question, "titles": list(ex.titles),
                             "paragraphs": list(ex.passages), "gold": [bool(g) for g in ex.gold],
                             **{f"picks_{m}": picks[m][i] for m in pipes}})
  for m in pipes:
    out[f"strict_{m}"] = float(np.mean([all(j in q[f"picks_{m}"] for j, g in enumerate(q["gold"]) if g)
                                        for q in out["questions"]]))
  return out


def forms(argv=None) -> int:
  """Candidate forms: whole paragraphs titled or untitled, documents split by the Pipeline
  (`FORMS_GRID`; training/RESULTS.md, Evaluation). The learned scorer uses the shipped weights
  unless `--weights` names others for a set."""
  p = parser(FORMS_GRID, forms.__doc__, out=os.path.join(runner.ROOT, "out", "hops", "forms.json"))
  p.add_argument("--record", default=None, metavar="FILE",
                 help="only write the shipped learned scorer's picks on the first 8 HotpotQA test "
                      f"questions (untitled, 256 tokens) to FILE, the test's reference ({REFERENCE})")
  p.add_argument("--per-question", default=None, metavar="FILE.npz",
                 help="also write each question's strict joint recall (`SET:FORM:BUDGET:CONFIG` arrays)")
  p.add_argument("--against", default=None, metavar="FILE.npz",
                 help="an earlier run's --per-question file: each configuration's paired difference "
                      "per set, form and budget (questions gained / lost)")
  args = p.parse_args(argv)
  if args.record:
    rec = reference_record(base=jaxsel.load_encoder(hop_features.ENCODER))
    atomic_write(args.record, json.dumps(rec, indent=1).encode("utf-8"))
    print(f"{args.record}: learned_hops {rec['strict_learned_hops']:.3f}, naive {rec['strict_naive']:.3f}")
    return 0
  grid = grid_of(FORMS_GRID, args)
  given = _pairs(args.weights)
  results = evaluate(grid, args, weights={s: given.get(s, hops.WEIGHTS) for s in grid.sets})
  if _probe(grid, ("naive",)):
    print("\n".join(runner.means_lines(results)))
    return 0
  report = {k: reports.forms_summary(r, grid.budgets) for k, r in results.items()}
  _write(args.out, report)
  print("\n".join(reports.forms_markdown(report, grid.budgets, {c.name: c.label for c in grid.configs})))
  per = {f"{k}:{b}:{m}": np.asarray(r["per_question"][m][b]["strict"], np.float32)
         for k, r in results.items() for m in r["per_question"] for b in grid.budgets}
  if args.per_question:
    atomic_savez(args.per_question, **per)
  if args.against:
    print("\n".join(reports.paired_lines(per, dict(np.load(args.against)))))
  return 0


_RUN = ("naive", "naive_auto", "pipeline", *ADAPTERS)  # what `defaults` runs unless --configs


def defaults(argv=None) -> int:
  """What users get without choosing a method or a granularity (`DEFAULTS`): `Pipeline(enc)`
  and each framework adapter built with only an encoder and a budget, given whole paragraphs,
  against NaiveRAG over the paragraphs and NaiveRAG at the default granularity; joint recall
  (a piece of every gold paragraph sent) with the paired bootstrap 95% CI of the difference
  from the better NaiveRAG."""
  p = parser(DEFAULTS, defaults.__doc__, out=os.path.join(runner.ROOT, "out", "defaults.json"))
  p.set_defaults(configs=",".join(c.name for c in DEFAULTS.configs if c.name in _RUN))
  p.add_argument("--adapters-every", type=int, default=1,
                 help="run the adapters on every K-th question only (they share the Pipeline's "
                      "code: `agree` counts identical picks)")
  args = p.parse_args(argv)
  grid = grid_of(DEFAULTS, args)
  grid = grid._replace(configs=tuple(c._replace(every=args.adapters_every) if c.select
                                     else c for c in grid.configs))
  results = evaluate(grid, args)
  adapters = [c.name for c in grid.configs if c.name in ADAPTERS]
  if _probe(grid, ("naive", "pipeline")) or len(grid.budgets) != 1:
    print("\n".join(runner.means_lines(results)))
    if len(grid.configs) == 2:
      print("\n".join(runner.paired_lines(results, *(c.name for c in grid.configs))))
    return 0
  b = grid.budgets[0]
  report = {k: reports.defaults_summary(r, b, adapters) for k, r in results.items()}
  _write(args.out, report)
  print("\n".join(reports.defaults_markdown(report, b, {c.name: c.label for c in grid.configs})))
  return 0


def agent_menu_command(argv=None) -> int:
  """The configuration agent over granularity, scorer and iterations per request
  (`AGENT_MENU`; the folds in `training/agent_menu.py`)."""
  p = parser(AGENT_MENU, agent_menu_command.__doc__, limit="100",
             out=os.path.join(runner.ROOT, "out", "agent_menu", "agent_menu.json"))
  p.add_argument("--epochs", type=int, default=60)
  p.add_argument("--resamples", type=int, default=10_000)
  p.add_argument("--inputs", default="query,request",
                 help="what the agent reads: query (embedding), request (features), outcomes "
                      "(each entry's outcome features, `training/outcomes.py`)")
  p.add_argument("--chooser", default="agent", choices=("agent", "ranker"),
                 help="agent: the ConfigAgent; ranker: each entry's answer in context from its "
                      "outcome (logistic regression; --inputs request,outcomes)")
  p.add_argument("--entries", default=None,
                 help="the menu entries to choose among, comma-separated (default: all)")
  args = p.parse_args(argv)
  inputs = tuple(args.inputs.split(","))
  if set(inputs) - set(agent_menu.INPUTS):
    raise SystemExit(f"--inputs: use some of {', '.join(agent_menu.INPUTS)}")
  entries = (tuple(range(len(agent_menu.MENU))) if args.entries is None
             else tuple(agent_menu.NAMES.index(n) for n in args.entries.split(",")))
  grid = grid_of(AGENT_MENU, args)
  results = evaluate(grid, args)
  base = jaxsel.load_encoder(hop_features.ENCODER)
  data = {s: agent_menu.outcomes({f: results[f"{s}:{f}"] for f in grid.forms}, s, grid, base=base,
                                 limit=limits_of(args.limit).get(s, limits_of(args.limit).get("*")))
          for s in grid.sets}
  rows = agent_menu.evaluate(data, entries=entries, inputs=inputs, chooser=args.chooser,
                             epochs=args.epochs,
                             n_resamples=args.resamples)
  _write(args.out, {k: {kk: (vv.tolist() if isinstance(vv, np.ndarray) else vv)
                        for kk, vv in r.items()} for k, r in rows.items()})
  print("\n".join(agent_menu.markdown(rows)))
  return 0

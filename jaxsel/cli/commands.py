"""The `jaxsel` commands: select, index build / search, ask, demo."""

from __future__ import annotations

import json
import sys
import time

import jaxsel
from jaxsel.defaults import DEFAULT_MAX_NEW_TOKENS, default_encoder_path
from jaxsel.cli.common import (CLIError, DEMO_DOCUMENT, DEMO_QUESTIONS, announce_large_input,
                               answer_model, answer_model_name, bad_input, default_model,
                               make_pipeline, openai_generator, read_documents, reader_tokenizer)


def _emit(args, result, out) -> None:
  if args.plot:
    try:
      result.plot(args.plot)
    except (OSError, ValueError) as e:
      raise CLIError(f"cannot write --plot {args.plot!r}: {e}") from None
  if args.json:
    d = result.to_dict()
    d["model"] = args.model
    out.write(json.dumps(d, ensure_ascii=False, indent=1) + "\n")
  elif getattr(args, "prompt", False):
    out.write(result.prompt() + "\n")
  else:
    out.write(result.table() + "\n")
  if args.plot and not args.json:
    out.write(f"saturation curve written to {args.plot}\n")


def _select(pipe, queries, source, args, **extra):
  if getattr(args, "scorer", None) and pipe.method_for(queries) != "corag":
    raise CLIError("--scorer applies to --method corag only.", 2)
  with bad_input():
    return pipe.select(queries or None, source, budget=args.budget, k=args.k,
                       min_gain=args.min_gain, **extra)



# ----------------------------------------------------------------------------- commands

def cmd_select(args, out) -> None:
  texts, sources = read_documents(args.files)
  queries = args.query or []
  unit = args.unit or ("passage" if queries else "sentence")
  pipe = make_pipeline(args, args.method, unit)  # default: corag with queries, coverage without
  announce_large_input(pipe, texts, granularity=args.granularity, budget=args.budget)
  _emit(args, _select(pipe, queries, texts, args, sources=sources,
                      max_per_group=args.max_per_doc, granularity=args.granularity), out)


def cmd_index_build(args, out) -> None:
  texts, sources = read_documents(args.inputs)
  pipe = make_pipeline(args, None, args.unit or "passage")
  announce_large_input(pipe, texts)
  with bad_input():
    index = pipe.build_index(texts, sources=sources, info={"model": args.model})
  try:
    index.save(args.out)
  except (OSError, ValueError) as e:
    raise CLIError(f"cannot save the index to {args.out!r}: {e}") from None
  out.write(f"indexed {len(index)} passages from {len(texts)} file(s) into {args.out}\n")


def _load_index(args) -> "jaxsel.VectorIndex":
  """The index of `args.index`; its encoder becomes `args.model` unless --model names one."""
  try:
    index = jaxsel.VectorIndex.load(args.index)
  except (OSError, ValueError) as e:
    raise CLIError(str(e)) from None
  if args.model_given is None:
    args.model = index.info.get("model") or args.model
  return index


def cmd_index_search(args, out) -> None:
  index = _load_index(args)
  pipe = make_pipeline(args, args.method, "passage", candidates=args.candidates)
  _emit(args, _select(pipe, args.query, index, args), out)


def cmd_ask(args, out) -> None:
  """Selects the context for the question and prints the answer model's answer."""
  method = args.method
  if args.scorer and (method or jaxsel.default_method(True)) != "corag":
    raise CLIError("--scorer applies to --method corag only.", 2)
  if args.index and args.late_chunking:
    raise CLIError("--late-chunking applies to files; an index keeps the vectors it was built "
                   "with (build it with `jaxsel index build --late-chunking`).", 2)
  extra, select_extra = {}, {}
  if args.index:
    source = _load_index(args)
    extra["candidates"] = args.candidates
  else:
    source, select_extra["sources"] = read_documents(args.files)
  t0 = time.perf_counter()
  if args.openai_url:
    generator = openai_generator(args)
  else:
    if not args.quiet:
      print(f"jaxsel: loading the answer model {answer_model_name(args)}", file=sys.stderr)
    generator = answer_model(args, args.generator, args.gguf)
  load_seconds = time.perf_counter() - t0
  # Budgets count in the answer model's tokens: its own tokenizer (an OpenAI-compatible
  # server's is --tokenizer), or --tokenizer for a local model.
  pipe = make_pipeline(args, method, "passage", generator=generator, **extra)
  if args.tokenizer and not args.openai_url:
    pipe = pipe.replace(tokenizer=reader_tokenizer(args.tokenizer))
  if not args.index:
    announce_large_input(pipe, source)
  try:
    with bad_input():
      answer = pipe.answer(
          args.question, source, budget=args.budget, k=args.k, min_gain=args.min_gain,
          max_new_tokens=args.max_new_tokens, context_window=args.context_window,
          **select_extra)
  except jaxsel.EndpointError as e:
    raise CLIError(str(e)) from None
  if args.plot:
    try:
      answer.selection.plot(args.plot)
    except (OSError, ValueError) as e:
      raise CLIError(f"cannot write --plot {args.plot!r}: {e}") from None
  if args.json:
    d = {"question": args.question, "answer": answer.text, "generator": answer.generator,
         "model": args.model, "timings": {"load_generator": load_seconds, **answer.timings},
         "prompt": answer.prompt, "selection": answer.selection.to_dict()}
    out.write(json.dumps(d, ensure_ascii=False, indent=1) + "\n")
    return
  if args.show_context:
    out.write(answer.selection.table() + f"\n\n--- answer ({answer.generator}) ---\n")
  out.write(answer.text + "\n")


def _demo_answer(args, result, out) -> None:
  """The offline model's answer to the prompt the demo printed."""
  try:
    generator = answer_model(args)
  except CLIError as e:
    out.write(f"\n--- answer ---\nnot generated: {e} (`--no-answer` skips this step)\n")
    return
  text = generator.generate([result.prompt()], max_new_tokens=DEFAULT_MAX_NEW_TOKENS)[0]
  out.write(f"\n--- answer from {generator.name}, a 135M-parameter model (expect a poor "
            "answer; `jaxsel ask --help` shows how to ask a real one) ---\n" + text + "\n")


def _found(result, titles) -> str:
  """Which of the paragraphs titled `titles` have a piece among the picks ("2/2: A, B")."""
  got = [t for t in titles if any(p.title and t in p.title for p in result.passages)]
  return f"{len(got)}/{len(titles)}" + (f" ({', '.join(got)})" if got else "")


def cmd_demo(args, out) -> None:
  """The real thing end to end: bundled encoder, built-in index, bundled document."""
  doc = DEMO_DOCUMENT.read_text("utf-8")
  first = json.loads(DEMO_QUESTIONS.read_text("utf-8").splitlines()[0])
  query = args.query or first["question_text"]
  out.write(f"document : {DEMO_DOCUMENT.name} (HotpotQA / Wikipedia, CC BY-SA 4.0; "
            f"see {DEMO_DOCUMENT.parent / 'LICENSE.md'})\n")
  local = default_encoder_path() if args.model == default_model() else None
  out.write(f"encoder  : {args.model}" + (f" (offline copy in {local})" if local else "") + "\n")
  reader = None
  if not args.no_answer:  # the answer model reads the context: the budget is in its tokens
    try:
      reader = answer_model(args)
    except CLIError as e:
      out.write(f"reader   : not loaded ({e}); counting the encoder's word pieces\n")
  pipe = make_pipeline(args, args.method, "passage", **({} if reader is None else {"generator": reader}))
  index = pipe.build_index([doc], sources=[DEMO_DOCUMENT.name], info={"model": args.model})
  out.write(f"index    : {len(index)} passages, dim {index.dim} (jaxsel.VectorIndex)\n")
  out.write(f"query    : {query}\n")
  if not args.query:
    out.write(f"answer   : {first['answers_objects'][0]['spans'][0]} (from HotpotQA; supporting "
              f"paragraphs: {', '.join(c['title'] for c in first['contexts'] if c['is_supporting'])})\n")
  unit = "the encoder's word pieces" if reader is None else f"{reader.name} tokens (the reader's)"
  result = _select(pipe, [query], index, args)
  out.write(f"budget   : {args.budget:g} {unit}, method {result.method}\n\n")
  pieces = jaxsel.token_counter(pipe.encoder).count([result.context()])[0]
  sent = "the encoder's word pieces" if reader is None else f"{reader.name} tokens"
  out.write(result.table() + f"\ncontext as sent: {result.cost} {sent} ({pieces} encoder word "
            "pieces)\n")
  if result.method != "naive":  # the baseline beside it, on the same candidates and budget
    naive = _select(pipe.replace(method="naive"), [query], index, args)
    out.write("\n--- NaiveRAG (most relevant first) on the same budget, for comparison ---\n"
              + naive.table() + "\n")
    if not args.query:
      gold = [c["title"] for c in first["contexts"] if c["is_supporting"]]
      out.write("\nsupporting paragraphs in the context: "
                f"{result.method} {_found(result, gold)}; naive {_found(naive, gold)}\n")
  out.write("\n--- prompt for the LLM ---\n" + result.prompt() + "\n")
  if reader is not None:
    out.flush()
    _demo_answer(args, result, out)

"""What the reader is sent, counted in its tokens: each candidate's cost as it sits in the
joined context, the exact count of a selection's context, and the room a context window leaves.

Shape legend: N candidates, K picks.

The budget counts the context `SelectionResult.context()` sends (passages joined by
`result.join_context`: a blank line between, `[i] ` before each) in the reader's tokens (a
`TokenCounter`). The design is the simplest exact one:

1. each candidate costs its text as it sits in that context: with the blank line before it and
   the widest number it can get (`"\\n\\n[N] " + text`), so the solver's sum is an upper bound
   of the context's count wherever the tokenizer splits at the blank line (byte-level BPE,
   WordPiece and SentencePiece tokenizers do; the tests check it on 1,000 random requests);
2. after the solve the context is counted as sent: that count is `SelectionResult.cost`, and
   where it is over the budget (a tokenizer that merges across the join) the last picks are
   dropped until it fits.

So `result.cost == counter.count([result.context()])` exactly, never above the budget.
Words (`unit="word"`) cost the word with the space before it; a gap between picked words (` … `)
is counted when the context is, and trimmed the same way.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

import numpy as np

from jaxsel._src import checks
from jaxsel._src import text as text_lib
from jaxsel._src.generation import default_generator, prompt_tokens
from jaxsel._src.pipeline.result import (DEFAULT_TEMPLATE, ORDERS, Answer, fill_template,
                                         join_context)
from jaxsel._src.tokens import TokenCounter

DEFAULT_ANSWER_BUDGET = 256  # `Pipeline.answer`'s budget without a window
SEPARATOR = "\n\n"  # between passages, as `result.join_context` writes it


def piece(number: int, text: str) -> str:
  """A passage as it follows another in the joined context (`join_context`'s format)."""
  return f"{SEPARATOR}[{number}] {text}"


def candidate_costs(counter: TokenCounter, texts, *, unit: str) -> np.ndarray:
  """`[N]` float32: what each candidate adds to the context as sent, in `counter`'s tokens
  (see the module docstring)."""
  texts = list(texts)
  if unit == "word":
    return counter.count([" " + t for t in texts]).astype(np.float32)
  return counter.count([piece(max(len(texts), 1), t) for t in texts]).astype(np.float32)


def split_to_fit(documents, counter: TokenCounter, *, unit: str, max_tokens: Optional[int],
                 sources=None, budget=None) -> list:
  """`Pipeline.split`: `documents` split into `Passage`s (`text.split_documents`), counted by
  `counter`; with a `budget`, short enough that each fits it alone as sent (see there)."""
  max_tokens = text_lib.default_max_tokens(unit, max_tokens)
  budget = checks.token_budget(budget, none="no budget")
  if budget is None or unit == "word":
    return text_lib.split_documents(documents, unit=unit, max_tokens=max_tokens,
                                    tokenizer=counter, sources=sources)
  # What a passage's number and separator cost as sent, at the widest number it may get.
  numbering = counter.count_one(piece(99_999, "x")) - counter.count_one("x")
  fit = int(budget) - max(numbering, 0)
  passages = []
  for _ in range(4):  # a tokenizer that merges across the numbering costs a little more
    if fit < 1:
      raise ValueError(f"`budget` {budget:g} leaves no room for a passage: each costs "
                       f"{numbering} tokens of numbering and separator as sent "
                       f"({piece(1, '')!r}); raise the budget.")
    limit = fit if max_tokens is None else min(max_tokens, fit)
    passages = text_lib.split_documents(documents, unit=unit, max_tokens=limit,
                                        tokenizer=counter, sources=sources)
    if not passages:
      return passages
    sent = candidate_costs(counter, [p.text for p in passages], unit=unit)
    over = int(sent.max()) - int(budget)
    if over <= 0 or limit < fit:  # fits, or the configured max_tokens decides
      return passages
    fit -= over
  return passages


def keep(result, m: int):
  """`result` with its first `m` picks only (pick order), everything else as it was."""
  scores = None if result.scores is None else result.scores[:m]
  return dataclasses.replace(result, passages=list(result.passages[:m]),
                             indices=result.indices[:m], scores=scores, gains=result.gains[:m],
                             curve=result.curve[:m])


def sent_cost(result, counter: TokenCounter) -> int:
  """`counter`'s count of `result.context()`, the context as sent (0 for no picks)."""
  return int(counter.count([result.context()])[0]) if len(result.passages) else 0


def fit(result, counter: TokenCounter, budget: Optional[float]):
  """`result` with `cost` = `counter`'s count of `result.context()`; while that is over
  `budget`, its last pick is dropped and the context counted again (the longest prefix of the
  picks that fits; one count when the costs' bound holds, as it does for the tokenizers tested)."""
  while True:
    n = sent_cost(result, counter)
    if budget is None or n <= budget or not len(result.passages):
      return dataclasses.replace(result, cost=n)
    result = keep(result, len(result.passages) - 1)


def window_room(generator, query: str, template: str, *, context_window,
                max_new_tokens: int) -> tuple:
  """(the prompt's limit `context_window - max_new_tokens`, the tokens left for the context
  after the template, the question and the chat template), in `generator`'s tokens
  (`generation.prompt_tokens`). A ValueError when the question, the template, the answer
  (`max_new_tokens`) and the shortest passage do not fit."""
  context_window = checks.integer(context_window, "context_window",
                                  what=" (the model's window in its tokens)")
  limit = context_window - int(max_new_tokens)
  bare = prompt_tokens(generator, fill_template(template, [query], ""))
  # The shortest context there can be: one passage of one character, numbered.
  least = prompt_tokens(generator, fill_template(template, [query], join_context(["."])))
  if least > limit:
    raise ValueError(
        f"The context_window of {context_window} is too small for the question, the template "
        f"and the answer: the question and the template alone take {bare} of the generator's "
        f"tokens (chat template included), {least} with the shortest passage, and "
        f"max_new_tokens={max_new_tokens} (the answer) leaves {limit}. Use a larger "
        "context_window, lower max_new_tokens, or shorten the question or the template.")
  return limit, limit - bare


def fit_prompt(selection, generator, counter: TokenCounter, *, template: str, order: str,
               limit: Optional[int]) -> tuple:
  """-> (selection, prompt): `selection.prompt(template, order=order)`, and while the generator
  reads more than `limit` tokens of it (a join that merges differently), the selection without
  its last pick (its `cost` counted again with `counter`)."""
  prompt = selection.prompt(template, order=order)
  while limit is not None and len(selection.passages) and prompt_tokens(generator, prompt) > limit:
    selection = keep(selection, len(selection.passages) - 1)
    selection = dataclasses.replace(selection, cost=sent_cost(selection, counter))
    prompt = selection.prompt(template, order=order)
  return selection, prompt


def answer(pipe, query: str, documents_or_index, *, budget, template, max_new_tokens: int,
           order: str, context_window, select_kwargs: dict) -> Answer:
  """`Pipeline.answer` (see there): `pipe.select`, the prompt fitted to the window, the
  generator's answer."""
  if not isinstance(query, str):
    raise TypeError(f"`query` must be one question (a str), got {type(query).__name__}.")
  checks.static_int(max_new_tokens, "max_new_tokens", 1, what="the longest answer in tokens")
  checks.choice(order, "order", ORDERS)
  checks.token_budget(budget, none="256, or what the window leaves")
  t0 = time.perf_counter()
  # The offline default's model is loaded once per process (`default_generator`); nothing
  # is stored on the Pipeline: `answer` leaves it as it was.
  generator = pipe.generator if pipe.generator is not None else default_generator()
  pipe = pipe if pipe.generator is generator else pipe.replace(generator=generator)
  if template is None:
    template = DEFAULT_TEMPLATE
  limit = None
  if context_window is not None:
    limit, room = window_room(generator, query, template, context_window=context_window,
                              max_new_tokens=max_new_tokens)
    budget = room if budget is None else min(budget, room)
  selection = pipe.select(query, documents_or_index,
                          budget=DEFAULT_ANSWER_BUDGET if budget is None else budget,
                          **select_kwargs)
  selection, prompt = fit_prompt(selection, generator, pipe.tokenizer, template=template,
                                 order=order, limit=limit)
  t1 = time.perf_counter()
  text = generator.generate([prompt], max_new_tokens=max_new_tokens)[0]
  t2 = time.perf_counter()
  return Answer(text=text, selection=selection, prompt=prompt, generator=generator.name,
                timings={"select": t1 - t0, "generate": t2 - t1})

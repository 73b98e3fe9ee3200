"""The FastAPI app of `jaxsel serve`: Jina's `POST /v1/rerank`, Cohere's `POST /v2/rerank`,
`GET /health` and `GET /metrics`.

Every request is checked here (a 4xx naming the field), then queued for the micro-batcher,
whose one worker thread runs the `Engine`. A failing request answers its own error; the
server keeps serving. Uvicorn's shutdown lets requests in flight finish, then the batcher
answers what is queued and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import time
import uuid
from typing import Optional, Sequence

import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

import jaxsel
from jaxsel.serve import models
from jaxsel.serve.batcher import MicroBatcher
from jaxsel.serve.engine import Engine, Job, Outcome, RequestError
from jaxsel.serve.metrics import Metrics
from jaxsel.defaults import DEFAULT_GRANULARITY, DEFAULT_MAX_PROGRAMS

log = logging.getLogger("jaxsel.serve")

DEFAULT_MAX_BODY_BYTES = 8 << 20
DEFAULT_MAX_DOCUMENTS = 1000
# A request whose body stops arriving for this long gets a 408 (a half-sent body must not hold
# a connection, or a shutdown, for ever).
DEFAULT_BODY_TIMEOUT_S = 10.0
ENDPOINTS = ("/v1/rerank", "/v2/rerank", "/health", "/metrics")
ERRORS = {status: {"model": models.ErrorResponse} for status in (400, 408, 413, 422, 500, 503)}
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")  # Swagger UI

# Every refusal is small whatever the request (under 64 kB): messages and field names are cut
# to these lengths, and a 422 lists at most `MAX_LISTED` of its errors, never their input.
MAX_MESSAGE = 2000
MAX_FIELD = 200
MAX_LISTED = 10
MAX_DIM = 1 << 16  # the longest embedding a request may send

DESCRIPTION = """Budget-aware, constraint-aware reranking in the shapes rerank clients speak.

`POST /v1/rerank` takes Jina's request, `POST /v2/rerank` Cohere's. Without jaxsel's
extensions they rank every document by relevance (the cosine of the query and the document
with the encoder's prompts). With `budget_tokens` (or `method`) the documents are *selected*:
`results` holds the documents chosen within the budget, in pick order, with `cost_tokens` and
`gain`, and `selection` says what was spent and the certificate. `pinned` keeps documents,
`groups` with `max_per_group` caps documents per label, `embeddings` with `query_embedding`
skip the server's encoder. Errors answer `{"error": {"message", "field"}}` with a 4xx.
"""


def _cut(text: str, most: int) -> str:
  return text if len(text) <= most else text[:most - 1] + "…"


def _error(status: int, message: str, field: Optional[str] = None, **extra) -> JSONResponse:
  """The server's one error shape, `{"error": {"message", "field"}}`, cut to a bounded size."""
  body = {"error": {"message": _cut(str(message), MAX_MESSAGE),
                    "field": None if field is None else _cut(str(field), MAX_FIELD)}}
  return JSONResponse({**body, **extra}, status_code=status)


# The library's argument names as the HTTP fields of a request (`Engine` passes `budget_tokens`
# as `budget`, `top_n` as `k`, one request of `select_many` as `requests[r]`).
LIBRARY_FIELDS = {"budget": "budget_tokens", "k": "top_n", "pinned": "pinned", "groups": "groups",
                  "max_per_group": "max_per_group", "embeddings": "embeddings",
                  "query_embeddings": "query_embedding", "queries": "query",
                  "documents_or_index": "documents", "granularity": "granularity",
                  "method": "method", "a": "embeddings", "b": "query_embedding",
                  "documents": "documents", "query": "query"}
_NAME = re.compile(r"`(?:requests\[\d+\]\.?)?([A-Za-z_]*)((?:\[\d+\])*)`")


def _http_error(e: Exception) -> RequestError:
  """A library error raised for a request, in the request's HTTP field names: the field is
  the first argument the message names that the request has (else None)."""
  message = " ".join(str(e).split())
  # The server does not split documents: the library's hint to split (`max_tokens`) is not the
  # client's to follow.
  message = message.replace(" or split into smaller passages (`max_tokens`)", "")
  fields = []

  def rename(m):
    name, index = m.group(1), m.group(2)
    if name not in LIBRARY_FIELDS:
      return m.group(0) if name else "the request"
    field = LIBRARY_FIELDS[name] + ("" if name == "queries" else index)
    fields.append(field)
    return f"`{field}`"

  message = _NAME.sub(rename, message)
  return RequestError(message, fields[0] if fields else None)


def _field(loc) -> Optional[str]:
  """`("body", "documents", 3, "Document", "title")` -> "documents[3].title"; None for the
  body itself."""
  parts = list(loc[1:]) if loc and loc[0] == "body" else list(loc)
  if not parts or not isinstance(parts[0], str):
    return None
  name = parts[0]
  for p in parts[1:]:
    if isinstance(p, int):
      name += f"[{p}]"
    elif p == "Document":  # the object member of `str | Document`: its field follows
      continue
    elif p in ("text", "title"):
      name += f".{p}"
    else:  # another union member's tag (`str`): not a field
      break
  return name


class _BodyLate(Exception):
  """The request's body stopped arriving (`stopping`: because the server is shutting down)."""

  def __init__(self, stopping: bool):
    super().__init__()
    self.stopping = stopping


class _Guard:
  """Pure ASGI middleware: refuses bodies over `max_body_bytes` with a 413 before the app reads
  them (by Content-Length, or counting a streamed body), answers a 408 when the body stops
  arriving for `body_timeout_s` and a 503 to a request still sending its body when the server
  starts to shut down (`stopping` set), and records each request's status and latency in the
  metrics."""

  def __init__(self, app, *, max_body_bytes: int, metrics: Metrics, body_timeout_s: float,
               state):
    self.app = app
    self.max_body_bytes = max_body_bytes
    self.metrics = metrics
    self.body_timeout_s = body_timeout_s
    self.state = state  # the app's: `stopping`, an event of the running loop

  async def __call__(self, scope, receive, send):
    if scope["type"] != "http":
      return await self.app(scope, receive, send)
    start, status = time.perf_counter(), [500]
    endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"

    async def send_status(message):
      if message["type"] == "http.response.start":
        status[0] = message["status"]
      await send(message)

    try:
      body = None
      if scope["method"] in ("POST", "PUT", "PATCH"):
        try:
          body = await self._read(scope, receive)
        except _BodyLate as late:
          response = (_error(503, "the server is shutting down; send the request again to "
                                  "another instance or after it restarts", None)
                      if late.stopping else
                      _error(408, f"the request body did not arrive within "
                                  f"{self.body_timeout_s:g} s", "body"))
          response.headers["connection"] = "close"
          return await response(scope, receive, send_status)
        if body is None:
          response = _error(413, f"the request body is over {self.max_body_bytes} bytes "
                                 "(`jaxsel serve --max-body-bytes`)", "body")
          return await response(scope, receive, send_status)
      if body is None:
        return await self.app(scope, receive, send_status)
      replayed = False

      async def replay():
        nonlocal replayed
        if not replayed:
          replayed = True
          return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

      await self.app(scope, replay, send_status)
    finally:
      self.metrics.observe(endpoint, status[0], time.perf_counter() - start)

  async def _receive(self, receive):
    """The next message of the request, or `_BodyLate` raised."""
    stopping = self.state.stopping
    if stopping.is_set():
      raise _BodyLate(True)
    message = asyncio.ensure_future(receive())
    stop = asyncio.ensure_future(stopping.wait())
    try:
      done, _ = await asyncio.wait((message, stop), timeout=self.body_timeout_s,
                                   return_when=asyncio.FIRST_COMPLETED)
    finally:
      stop.cancel()
    if message in done:
      return message.result()
    message.cancel()
    raise _BodyLate(stop in done)

  async def _read(self, scope, receive) -> Optional[bytes]:
    """The whole body, or None when it is over the limit."""
    for name, value in scope.get("headers", ()):
      if name == b"content-length":
        try:
          if int(value) > self.max_body_bytes:
            return None
        except ValueError:
          pass
    chunks, size = [], 0
    while True:
      message = await self._receive(receive)
      if message["type"] == "http.disconnect":
        return b"".join(chunks)
      chunk = message.get("body", b"")
      size += len(chunk)
      if size > self.max_body_bytes:
        return None
      chunks.append(chunk)
      if not message.get("more_body", False):
        return b"".join(chunks)


def _kind(x) -> str:
  """What a JSON value is, in a message (never the value itself: it may be huge)."""
  return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
          int: "a number", float: "a number", type(None): "null"}.get(type(x), "a value")


def _numbers(row, name: str) -> Optional[RequestError]:
  if not isinstance(row, list):
    return RequestError(f"`{name}` must be a list of numbers, got {_kind(row)}", name)
  if len(row) > MAX_DIM:
    return RequestError(f"`{name}` holds {len(row)} numbers, over the {MAX_DIM} an embedding "
                        "may have", name)
  if all(type(x) is float or type(x) is int for x in row):
    return None
  j = next(j for j, x in enumerate(row) if not (type(x) is float or type(x) is int))
  return RequestError(f"`{name}[{j}]` must be a number, got {_kind(row[j])}", f"{name}[{j}]")


def _shape_error(data, max_documents: int) -> Optional[RequestError]:
  """The first fault in the lists of a parsed request body (`documents`, `pinned`, `groups`,
  `embeddings`, `query_embedding`), or None. Checked before the schema is, in work linear in
  the body and stopping at the first fault: a body of a million bad items gets one error at
  once, where validating it against the schema would list millions. More documents than
  `max_documents` is a 413 before any is looked at."""
  if not isinstance(data, dict):
    return None  # the schema's own error: the body must be an object
  docs = data.get("documents")
  if isinstance(docs, list):
    if len(docs) > max_documents:
      return RequestError(f"{len(docs)} documents is over this server's limit of "
                          f"{max_documents} (`jaxsel serve --max-documents`)", "documents", 413)
    for i, d in enumerate(docs):
      if type(d) is str or (type(d) is dict and type(d.get("text")) is str):
        continue
      if type(d) is dict:
        return RequestError(f"`documents[{i}].text` must be a string, got "
                            f"{_kind(d.get('text'))}", f"documents[{i}].text")
      return RequestError(f"`documents[{i}]` must be a string or an object with a `text` "
                          f"string, got {_kind(d)}", f"documents[{i}]")
  for name, types in (("pinned", (int,)), ("groups", (int, str))):
    x = data.get(name)
    if isinstance(x, list):
      if len(x) > max_documents:
        return RequestError(f"`{name}` holds {len(x)} entries, more than this server takes "
                            f"documents ({max_documents})", name)
      for j, v in enumerate(x):
        if type(v) not in types:
          want = "a document index" if name == "pinned" else "a string or an integer label"
          return RequestError(f"`{name}[{j}]` must be {want}, got {_kind(v)}", f"{name}[{j}]")
  q = data.get("query_embedding")
  if q is not None:
    err = _numbers(q, "query_embedding")
    if err is not None:
      return err
  e = data.get("embeddings")
  if isinstance(e, list):
    if len(e) > max_documents:
      return RequestError(f"`embeddings` holds {len(e)} rows, more than this server takes "
                          f"documents ({max_documents})", "embeddings")
    for i, row in enumerate(e):
      err = _numbers(row, f"embeddings[{i}]")
      if err is not None:
        return err
  return None


class _OrjsonRequest(Request):
  """A request whose JSON body is parsed by orjson: 0.14 ms instead of `json.loads`' 0.85 ms
  for a body of 10 documents with 384-d embeddings, most of a batched request's HTTP cost.
  Its `JSONDecodeError` is `json`'s, so FastAPI reports malformed JSON as before. Unlike
  `json.loads` it refuses the non-standard `NaN`/`Infinity` literals (a 400, malformed JSON)."""

  async def json(self):
    if not hasattr(self, "_json"):
      self._json = orjson.loads(await self.body())
    return self._json


class _Route(APIRoute):
  """The server's routes: bodies parsed by `_OrjsonRequest`, their lists checked by
  `_shape_error` (off the event loop) before the schema is."""

  def get_route_handler(self):
    handler = super().get_route_handler()

    async def route(request: Request):
      request = _OrjsonRequest(request.scope, request.receive)
      if request.method == "POST":
        try:
          data = await request.json()
        except Exception:  # noqa: BLE001 -- malformed JSON: the schema's check answers it
          data = None
        err = await asyncio.to_thread(_shape_error, data, request.app.state.max_documents)
        if err is not None:
          return _error(err.status, str(err), err.field)
      return await handler(request)

    return route


def _scaled(x: np.ndarray) -> np.ndarray:
  """`x` `[..., D]` with each vector scaled by a power of two that brings its largest entry
  to [0.5, 1) where that entry is outside [2^-30, 2^30]: the cosine is the same, and the norm
  no longer overflows float32 (entries of 1e20) or underflows (a query of 1e-30). Powers of two
  scale exactly, and vectors of ordinary size are left as they are."""
  top = np.abs(x).max(axis=-1, keepdims=True)
  extreme = (top > 2.0 ** 30) | ((top < 2.0 ** -30) & (top > 0))
  if not extreme.any():
    return x
  exponent = np.frexp(np.where(extreme, top, 1))[1]
  return np.ldexp(x, np.where(extreme, -exponent, 0)).astype(np.float32)


def _job(body: models.Extensions, *, max_documents: int, max_tokens_per_doc=None) -> Job:
  """The checked `Job` of a request body (a `RequestError` naming the field otherwise)."""
  texts = [d if isinstance(d, str) else d.text for d in body.documents]
  n = len(texts)
  if n > max_documents:
    raise RequestError(f"{n} documents is over this server's limit of {max_documents} "
                       "(`jaxsel serve --max-documents`)", "documents", 413)
  if n == 0:
    raise RequestError("`documents` is empty: give at least one document", "documents")
  if not body.query.strip():
    raise RequestError("`query` is empty", "query")
  if body.method is not None and body.method not in jaxsel.available_methods():
    raise RequestError(f"unknown method {_cut(repr(body.method), 100)}; use one of "
                       f"{', '.join(jaxsel.available_methods())}", "method")
  granularity = body.granularity or DEFAULT_GRANULARITY
  select = body.budget_tokens is not None or body.method is not None or granularity == "sentence"
  # `pinned`, `groups` and `max_per_group` are the library's to check (`Pipeline.pick_many`),
  # as blank documents are: its errors come back in the request's field names (`_http_error`).
  embeddings = query_embedding = None
  if (body.embeddings is None) != (body.query_embedding is None):
    field = "query_embedding" if body.query_embedding is None else "embeddings"
    raise RequestError("`embeddings` and `query_embedding` go together", field)
  if body.embeddings is not None:
    d = len(body.query_embedding)
    if len(body.embeddings) != n or any(len(row) != d for row in body.embeddings) or d == 0:
      raise RequestError(f"`embeddings` must be [N, D] = [{n}, {d}]: one row per document, "
                         "each as long as `query_embedding`", "embeddings")
    for name, rows in (("embeddings", body.embeddings), ("query_embedding", [body.query_embedding])):
      with np.errstate(over="ignore"):
        x = np.asarray(rows, np.float32)
      if not np.isfinite(x).all():
        raise RequestError(f"`{name}` holds a value that is not finite in float32 (beyond "
                           "±3.4e38)", name)
      if not (np.abs(x).max(axis=-1) > 0).all():
        raise RequestError(f"`{name}` holds a zero vector (no direction to compare)", name)
      x = _scaled(x)
      if name == "embeddings":
        embeddings = x
      else:
        query_embedding = x[0]
  if granularity == "sentence" and embeddings is not None:
    raise RequestError("`granularity` 'sentence' embeds each document's sentences with the "
                       "server's encoder; leave out `embeddings` and `query_embedding`",
                       "granularity")
  titles = tuple(None if isinstance(d, str) else d.title for d in body.documents)
  return Job(query=body.query, texts=tuple(texts),
             titles=titles if any(t is not None for t in titles) else None,
             top_n=None if body.top_n is None else min(body.top_n, n),
             select=select, granularity=granularity,
             budget=body.budget_tokens, method=body.method,
             pinned=None if body.pinned is None else tuple(body.pinned),
             groups=None if body.groups is None else tuple(body.groups),
             max_per_group=None if body.max_per_group is None else min(body.max_per_group, n),
             embeddings=embeddings, query_embedding=query_embedding,
             max_tokens_per_doc=max_tokens_per_doc)


def _results(outcome: Outcome, texts=None) -> list:
  out = []
  for p in outcome.picks:
    r = {"index": p.index, "relevance_score": p.relevance}
    if texts is not None:
      r["document"] = {"text": texts[p.index][p.start:p.end]}
    if p.start is not None:  # a part of the document (granularity "sentence")
      r["start"], r["end"] = p.start, p.end
      if p.prefix:  # its title, sent before it (the document's `title`)
        r["prefix"] = p.prefix
    if outcome.selection is not None:
      r["cost_tokens"] = p.cost
      r["gain"] = p.gain if math.isfinite(p.gain) else None
    out.append(r)
  return out


def _with_selection(response: dict, outcome: Outcome) -> dict:
  """`response` with the `selection` object of a selection (a plain ranking has none; fields
  left out of a response are left out of its JSON, a null `certified` is kept)."""
  if outcome.selection is not None:
    response["selection"] = outcome.selection
  return response


def create_app(pipeline: "jaxsel.Pipeline", *, method: Optional[str] = None,
               model_name: str = "jaxsel", max_batch: int = 32, batch_wait_ms: float = 5.0,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               max_documents: int = DEFAULT_MAX_DOCUMENTS, warm_up: bool = True,
               warm_documents: Sequence[int] = (3,),
               body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
               max_programs: int = DEFAULT_MAX_PROGRAMS) -> FastAPI:
  """The server's ASGI app over `pipeline` (its encoder embeds, its tokenizer counts).

  Args:
    pipeline: a `jaxsel.Pipeline`.
    method: the method of a selection that names none (default: the pipeline's, else CORAG).
    model_name: the `model` answered when a request names none.
    max_batch, batch_wait_ms: most requests per batch, and how long the first waits for others.
    max_body_bytes, max_documents: larger requests get a 413.
    warm_up: compile the ranking and the default method's batched solves at start-up,
      for requests of each number of `warm_documents` (others compile at their first batch).
    body_timeout_s: a request whose body stops arriving for this long gets a 408.
    max_programs: compiled programs the server keeps; once that many were loaded it frees
      them all between two batches, and the next requests compile (or load from the
      persistent cache) what they need. Each holds up to ~270 memory mappings on CPU, and a
      process past the system's limit (Linux: 65,530) aborts inside the compiler.

  `app.state.stopping` (an `asyncio.Event`) set by the server when it starts to shut down
  answers a 503 to requests still sending their body (`jaxsel.serve.run` and `background`
  set it), so that a half-sent body does not hold the shutdown.
  """
  if method is not None and method not in jaxsel.available_methods():
    raise ValueError(f"unknown method {method!r}; use one of {jaxsel.available_methods()}.")
  engine = Engine(pipeline, method=method, max_batch=max_batch, max_programs=max_programs)
  metrics = Metrics(engine.programs)
  batcher = MicroBatcher(engine.run, max_batch=max_batch, wait_s=batch_wait_ms / 1000,
                         on_batch=metrics.batch_size.observe)

  @contextlib.asynccontextmanager
  async def lifespan(app: FastAPI):
    app.state.stopping = asyncio.Event()
    if warm_up:
      t0 = time.perf_counter()
      await asyncio.to_thread(engine.warm_up, tuple(warm_documents))
      log.info("jaxsel serve: warmed up in %.1f s", time.perf_counter() - t0)
    batcher.start()
    app.state.ready = True
    try:
      yield
    finally:
      app.state.ready = False
      await batcher.stop()

  # Swagger UI from the package's own files (`static/`), never from a CDN; no ReDoc page.
  app = FastAPI(title="jaxsel serve", version=jaxsel.__version__, description=DESCRIPTION,
                lifespan=lifespan, docs_url=None, redoc_url=None)
  app.router.route_class = _Route
  app.state.ready = False
  app.state.engine = engine
  app.state.max_documents = max_documents
  app.state.stopping = asyncio.Event()  # a new one for each run of the server (`lifespan`)
  app.add_middleware(_Guard, max_body_bytes=max_body_bytes, metrics=metrics,
                     body_timeout_s=body_timeout_s, state=app.state)
  app.mount("/static", StaticFiles(directory=STATIC), name="static")

  @app.get("/docs", include_in_schema=False)
  async def docs_page():
    return get_swagger_ui_html(
        openapi_url=app.openapi_url, title=f"{app.title} - Swagger UI",
        swagger_js_url="/static/swagger-ui-bundle.js", swagger_css_url="/static/swagger-ui.css",
        swagger_favicon_url="/static/favicon-32x32.png",
        swagger_ui_parameters={"validatorUrl": None})  # no badge from validator.swagger.io

  @app.exception_handler(RequestValidationError)
  async def invalid(request: Request, exc: RequestValidationError):
    # `exc.errors()` is short: `_Route` refused bodies whose lists are at fault before the
    # schema was checked. Listed without the `input` (it may be the whole body, or nested
    # 1,000 deep), at most `MAX_LISTED`.
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
      return _error(400, f"malformed JSON: {first.get('msg', '')}", "body")
    # The most specific error names the field (a document object's bad `title`, not the
    # string member of `str | Document` the object is not).
    first = max(errors, key=lambda e: len(e.get("loc", ())), default=first)
    field = _field(first.get("loc", ()))
    if field is None:
      message = "the body must be a JSON object with `query` and `documents`"
    else:
      message = f"`{_cut(field, MAX_FIELD)}`: {first.get('msg', 'invalid')}"
    detail = [{"loc": [x if isinstance(x, int) else _cut(str(x), 100)
                       for x in list(e.get("loc", ()))[:8]],
               "msg": _cut(str(e.get("msg", "")), 300), "type": _cut(str(e.get("type", "")), 100)}
              for e in errors[:MAX_LISTED]]
    return _error(422, message, field, detail=detail, errors=len(errors))

  @app.exception_handler(RequestError)
  async def refused(request: Request, exc: RequestError):
    return _error(exc.status, str(exc), exc.field)

  @app.exception_handler(HTTPException)
  async def http_error(request: Request, exc: HTTPException):  # 404, 405: the same shape
    message = {404: f"no such endpoint: {_cut(request.url.path, 200)}; the server answers "
                    f"{', '.join(ENDPOINTS)} and /docs",
               405: f"{request.method} is not allowed on {_cut(request.url.path, 200)}"
               }.get(exc.status_code, str(exc.detail))
    response = _error(exc.status_code, message, None)
    response.headers.update(exc.headers or {})  # a 405's `Allow`
    return response

  @app.exception_handler(Exception)
  async def failed(request: Request, exc: Exception):
    log.error("request failed: %r", exc)
    return _error(500, f"internal error ({type(exc).__name__}); the server keeps serving")

  async def run(job: Job):
    """The job's `Outcome`, a 500 response, or a `RequestError` raised (a 4xx)."""
    try:
      return await batcher.submit(job)
    except RequestError:
      raise
    except (ValueError, TypeError) as e:  # the library's checks: the request's fault
      raise _http_error(e) from None
    except Exception as e:  # noqa: BLE001 -- this request fails; the server keeps serving
      log.error("request failed: %r", e)
      return _error(500, f"internal error ({type(e).__name__}); the server keeps serving")

  @app.post("/v1/rerank", response_model=models.JinaRerankResponse, response_model_exclude_unset=True,
            responses=ERRORS, summary="Rerank or select documents (Jina's shape)")
  async def rerank_v1(body: models.JinaRerankRequest):
    job = _job(body, max_documents=max_documents)
    outcome = await run(job)
    if not isinstance(outcome, Outcome):
      return outcome
    return _with_selection(
        {"model": body.model or model_name, "usage": {"total_tokens": outcome.total_tokens},
         "results": _results(outcome, job.texts if body.return_documents else None)}, outcome)

  @app.post("/v2/rerank", response_model=models.CohereRerankResponse,
            response_model_exclude_unset=True,
            responses=ERRORS, summary="Rerank or select documents (Cohere's shape)")
  async def rerank_v2(body: models.CohereRerankRequest):
    job = _job(body, max_documents=max_documents, max_tokens_per_doc=body.max_tokens_per_doc)
    outcome = await run(job)
    if not isinstance(outcome, Outcome):
      return outcome
    return _with_selection(
        {"id": str(uuid.uuid4()), "results": _results(outcome),
         "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1},
                  "tokens": {"input_tokens": outcome.total_tokens}}}, outcome)

  @app.get("/health", summary="Whether the server is up and warmed up")
  async def health():
    ready = bool(app.state.ready)
    return JSONResponse({"status": "ok" if ready else "starting", "model": model_name,
                         "method": engine.method}, status_code=200 if ready else 503)

  @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
  async def metrics_page():
    return Response(metrics.render(), media_type=metrics.content_type)

  return app

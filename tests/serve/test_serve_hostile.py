"""`jaxsel serve` against hostile and careless clients (issue 47), on a real loopback server:
every refusal is a small JSON body in the server's error shape naming the HTTP field, produced
without blocking other requests; integers are bounded; timeouts on headers and bodies; a
bounded shutdown; every method × granularity answers with each document's own relevance;
blank documents are never selected; extreme embeddings give their true cosine; one rule for
`max_per_group`."""

import concurrent.futures
import os
import signal
import socket
import sys
import threading
import time

import httpx
import numpy as np
import orjson
import pytest

import jaxsel
from jaxsel import serve
from jaxsel.serve import app as app_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = [f"The {w} live here. The {w} eat grass. The {w} sleep at night. Nobody sees the {w}."
        for w in "cats dogs birds fish".split()]
QUERY = "Where do the cats sleep?"
SMALL = 64_000  # every refusal's body is under this many bytes
BODY_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def pipe():
  return jaxsel.Pipeline(jaxsel.testing.tiny_encoder())


@pytest.fixture(scope="module")
def url(pipe):
  # max_documents high enough that a million documents reach the checks of each document.
  app = serve.create_app(pipe, max_batch=4, warm_up=False, max_documents=1_000_000,
                         body_timeout_s=BODY_TIMEOUT_S)
  with serve.background(app) as base:
    yield base


def post(url, body, path="/v1/rerank", **kw):
  if isinstance(body, (bytes, str)):
    return httpx.post(url + path, content=body, headers={"content-type": "application/json"},
                      timeout=120, **kw)
  return httpx.post(url + path, json=body, timeout=120, **kw)


def refused(r, status, field):
  """The refusal `r`: its status, a small JSON body in the error shape, naming `field`."""
  assert r.status_code == status, r.text[:2000]
  assert len(r.content) < SMALL and r.headers["content-type"] == "application/json"
  err = r.json()["error"]
  assert err["field"] == field and err["message"], err
  return err


# -- refusals: small, JSON, and without blocking ---------------------------------------------


def test_a_million_invalid_documents_get_a_small_422_while_health_answers(url):
  """A 2 MB body of 1,000,000 invalid documents (and a 4 MB one of 1,000,000 invalid
  embedding entries): one error naming the first, small, at once; `/health` answers within
  2 s all the while."""
  bodies = {
      "documents[0]": b'{"query": "x", "documents": [' + b",".join([b"1"] * 1_000_000) + b"]}",
      "embeddings[0][0]": orjson.dumps({"query": "x", "documents": ["d"] * 1000,
                                        "embeddings": [["x"] * 1000] * 1000,
                                        "query_embedding": [1.0] * 1000}),
  }
  for field, body in bodies.items():
    done = threading.Event()
    latencies = []

    def probe():
      with httpx.Client(timeout=10) as client:
        while not done.is_set() and len(latencies) < 600:
          t0 = time.perf_counter()
          assert client.get(url + "/health").status_code == 200
          latencies.append(time.perf_counter() - t0)
          time.sleep(0.05)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      prober = pool.submit(probe)
      t0 = time.perf_counter()
      r = post(url, body)
      seconds = time.perf_counter() - t0
      done.set()
      prober.result(timeout=60)
    err = refused(r, 422, field)
    print(f"{len(body) / 1e6:.1f} MB body: a {len(r.content)}-byte 422 in {seconds:.2f} s; "
          f"/health at most {max(latencies, default=0):.3f} s over {len(latencies)} probes")
    assert seconds < 10 and max(latencies, default=0) < 2.0
    assert "1" * 20 not in err["message"] and "input" not in r.text


def test_404_and_405_answer_the_error_shape(url):
  refused(httpx.get(url + "/nowhere", timeout=10), 404, None)
  r = httpx.get(url + "/v1/rerank", timeout=10)
  refused(r, 405, None)
  assert "POST" in r.headers["allow"]
  refused(httpx.post(url + "/health", timeout=10), 405, None)
  refused(httpx.get(url + "/redoc", timeout=10), 404, None)


def _deep(depth: int) -> bytes:
  return b"[" * depth + b"]" * depth


def test_deep_nesting_answers_a_json_422_not_a_500(url):
  head = b'{"query": "x", "documents": '
  refused(post(url, head + _deep(1000) + b"}"), 422, "documents[0]")
  refused(post(url, head + b"[" + _deep(1000) + b"]}"), 422, "documents[0]")
  refused(post(url, b'{"documents": ["d"], "query": ' + _deep(1000) + b"}"), 422, "query")
  # Nested in a field the server ignores: answered as if it were not there.
  r = post(url, b'{"query": "x", "documents": ["d"], "extra": ' + _deep(1000) + b"}")
  assert r.status_code == 200, r.text
  refused(post(url, head + _deep(5000) + b"}"), 400, "body")  # deeper than the parser goes


def test_every_refusal_is_small_whatever_its_input(url):
  huge = "x" * 1_000_000
  refused(post(url, {"query": "x", "documents": DOCS, "method": huge}), 422, "method")
  refused(post(url, {"query": "x", "documents": DOCS[:2], "groups": [huge, huge],
                     "pinned": [0, 1], "max_per_group": 1}), 422, "pinned")
  refused(post(url, {"query": huge * 0 + "x", "documents": DOCS, "granularity": huge}), 422,
          "granularity")
  refused(post(url, {"query": [huge] * 5, "documents": DOCS}), 422, "query")
  refused(post(url, {huge: 1, "documents": DOCS}), 422, "query")


@pytest.mark.parametrize("field,value", [
    ("max_per_group", 1e12), ("top_n", 1e12), ("budget_tokens", 1e12),
    ("max_per_group", 10 ** 15), ("top_n", 2 ** 31), ("max_tokens_per_doc", 1e12),
    ("pinned", [10 ** 15]), ("pinned", [1e12]), ("max_per_group", 0)])
def test_huge_integers_are_refused_naming_the_field(url, field, value):
  body = {"query": "x", "documents": DOCS, field: value}
  if field == "max_per_group":
    body["groups"] = [0, 0, 1, 1]
  err = refused(post(url, body, path="/v2/rerank"), 422, field + ("[0]" if field == "pinned"
                                                                  else ""))
  assert field in err["message"]


def test_top_n_over_the_documents_returns_them_all(url):
  r = post(url, {"query": "x", "documents": DOCS, "top_n": 100_000})
  assert r.status_code == 200 and len(r.json()["results"]) == len(DOCS)


LIBRARY_NAMES = ("`budget`", "`k`", "`max_tokens`", "requests[", "`queries", "documents_or_index",
                 "`query_embeddings`")


@pytest.mark.parametrize("body,field", [
    ({"budget_tokens": 1}, "budget_tokens"),  # below every document
    ({"budget_tokens": 200, "pinned": [0, 1, 2], "top_n": 2}, "pinned"),  # over top_n
    ({"budget_tokens": 100, "pinned": [0, 1]}, "pinned"),  # the pinned alone over the budget
])
def test_library_errors_name_the_http_field(url, body, field):
  err = refused(post(url, {"query": "x", "documents": DOCS, "method": "naive", **body}), 422,
                field)
  assert not any(name in err["message"] for name in LIBRARY_NAMES), err["message"]


def test_library_messages_in_http_fields():
  """The mapping itself, on messages the library raises."""
  cases = [
      ("`requests[0].pinned` holds 3 passages, more than `k`=2 allows.", "pinned",
       "`pinned` holds 3 passages, more than `top_n`=2 allows."),
      ("`budget` 1 is below the smallest passage (5 tokens); raise the budget or split into "
       "smaller passages (`max_tokens`).", "budget_tokens",
       "`budget_tokens` 1 is below the smallest passage (5 tokens); raise the budget."),
      ("`requests[2]` has no documents.", None, "the request has no documents."),
      ("`query_embeddings` must be [Q, D]", "query_embedding", "`query_embedding` must be [Q, D]"),
      ("`queries[0]` is empty", "query", "`query` is empty"),
  ]
  for message, field, want in cases:
    e = app_module._http_error(ValueError(message))
    assert (e.field, str(e)) == (field, want)


# -- timeouts and shutdown ---------------------------------------------------------------------


def _connect(url) -> socket.socket:
  host, port = url.rsplit("/", 1)[-1].split(":")
  return socket.create_connection((host, int(port)), timeout=30)


def _answer(sock: socket.socket) -> tuple:
  """(status, JSON body) of the response on `sock`, read until the server closes it."""
  data = b""
  while chunk := sock.recv(65536):
    data += chunk
  head, _, body = data.partition(b"\r\n\r\n")
  return int(head.split()[1]), orjson.loads(body)


HALF = (b"POST /v1/rerank HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: 1000\r\n\r\n" + b'{"query": "x", "documents": ["' + b"a" * 400)


def test_a_half_sent_body_times_out_with_a_408(url):
  with _connect(url) as sock:
    t0 = time.monotonic()
    sock.sendall(HALF)
    status, body = _answer(sock)
  assert status == 408 and body["error"]["field"] == "body"
  assert BODY_TIMEOUT_S - 0.5 < time.monotonic() - t0 < BODY_TIMEOUT_S + 3
  assert httpx.get(url + "/health", timeout=10).status_code == 200


def test_trickled_or_endless_headers_are_cut_off(url, monkeypatch):
  monkeypatch.setattr(serve, "HEADER_TIMEOUT_S", 1.0)
  with _connect(url) as sock:
    t0 = time.monotonic()
    sock.sendall(b"POST /v1/rerank HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
    status, body = _answer(sock)
  assert status == 408 and "headers" in body["error"]["message"]
  assert time.monotonic() - t0 < 5
  with _connect(url) as sock:
    sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n")
    try:
      for i in range(200):  # 100 kB of headers, never finished
        sock.sendall(b"x-h%d: %s\r\n" % (i, b"v" * 500))
      status, body = _answer(sock)
    except OSError:  # closed while we sent: the answer may be lost to the reset
      status = 431
  assert status == 431
  assert httpx.get(url + "/health", timeout=10).status_code == 200


def test_a_half_sent_body_does_not_hold_the_shutdown(tmp_path, server_process):
  """SIGTERM while a client holds headers and half a body: the client gets a 503 and the
  `serve.run` process exits within a few seconds."""
  code = ("import sys, jaxsel\nfrom jaxsel import serve\n"
          "serve.run(jaxsel.Pipeline(jaxsel.testing.tiny_encoder()), port=int(sys.argv[1]), "
          "warm_up=False, log_level='info')\n")
  proc, base = server_process(lambda port: [sys.executable, "-c", code, str(port)],
                              str(tmp_path), timeout=300)
  with _connect(base) as sock:
    sock.sendall(HALF)
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status, body = _answer(sock)
    rc = proc.wait(timeout=30)
    seconds = time.monotonic() - t0
  log = proc.stdout.read().decode(errors="replace")
  print(f"SIGTERM with a half-sent body: a {status} to that client, exit in {seconds:.2f} s")
  assert status == 503 and "shutting down" in body["error"]["message"]
  assert rc in (0, -signal.SIGTERM) and seconds < 5, (seconds, log[-3000:])


# -- what a request selects --------------------------------------------------------------------


def _sentence_relevance(pipe, passages):
  """Each sentence candidate's relevance as the pipeline sees it: [(doc, start, end, r)]."""
  res = pipe.replace(method="naive").select(QUERY, passages, granularity="sentence",
                                            budget=10 ** 6)
  r = np.asarray(res.candidate_scores).max(axis=0)
  return [(c.doc, c.start, c.end, float(x)) for c, x in zip(res.candidates, r)]


@pytest.mark.parametrize("granularity", ["passage", "sentence"])
def test_every_method_and_granularity_answers_with_each_documents_own_relevance(
    url, pipe, granularity):
  docs = DOCS + ["", " \n "]
  cos = np.asarray(jaxsel.cosine_similarity(pipe.embed([QUERY], "query"),
                                            pipe.embed(docs, "passage"), nonneg=None))[0]
  counts = pipe.tokenizer.count(docs)
  passages = [jaxsel.Passage(d, 0, len(d), doc=i, tokens=int(c))
              for i, (d, c) in enumerate(zip(docs, counts)) if d.strip()]
  sentences = _sentence_relevance(pipe, passages) if granularity == "sentence" else None
  for method in jaxsel.available_methods():
    r = post(url, {"query": QUERY, "documents": docs, "budget_tokens": 120, "method": method,
                   "granularity": granularity})
    assert r.status_code == 200, (method, r.text)
    results = r.json()["results"]
    assert results and all(x["index"] < len(DOCS) for x in results), method  # never a blank
    for x in results:
      i, start, end = x["index"], x.get("start", 0), x.get("end", len(docs[x["index"]]))
      if method == "coverage":  # no query: the document's cosine, as ranked
        want = cos[i]
      elif granularity == "passage":
        want = max(cos[i], 0.0)
      else:  # the best sentence of the part kept, of this document
        want = max(s for d, a, b, s in sentences if d == i and start <= a and b <= end)
      assert abs(x["relevance_score"] - want) < 1e-4, (method, x, want)


def test_empty_and_whitespace_documents_are_never_selected(url):
  docs = ["", "The Seine flows through Paris.", " "]
  for method in (None, "naive", "facility_location"):
    r = post(url, {"query": "Which river flows through Paris?", "documents": docs,
                   "budget_tokens": 100, "method": method})
    assert r.status_code == 200, r.text
    assert [x["index"] for x in r.json()["results"]] == [1], (method, r.text)
  refused(post(url, {"query": "x", "documents": docs, "budget_tokens": 100, "pinned": [2]}),
          422, "pinned[0]")
  refused(post(url, {"query": "x", "documents": ["", "\t"], "budget_tokens": 100}), 422,
          "documents")
  ranked = post(url, {"query": "x", "documents": docs}).json()["results"]  # a ranking: all
  assert sorted(x["index"] for x in ranked) == [0, 1, 2]


@pytest.mark.parametrize("scale,query_scale", [(1e20, 1.0), (1.0, 1e-30), (1e-30, 1e20)])
def test_extreme_embeddings_give_the_true_cosine(url, scale, query_scale):
  e = np.asarray([[1.0, 1.0], [1.0, 0.25], [0.0, 1.0]])
  q = np.asarray([1.0, 0.0])
  want = {0: 1 / np.sqrt(2), 1: 1 / np.sqrt(1.0625), 2: 0.0}  # 0.71, 0.97, 0
  body = {"query": "x", "documents": ["a.", "b.", "c."], "embeddings": (e * scale).tolist(),
          "query_embedding": (q * query_scale).tolist()}
  for extra in ({}, {"method": "naive", "budget_tokens": 1000}):
    r = post(url, {**body, **extra})
    assert r.status_code == 200, r.text
    got = {x["index"]: x["relevance_score"] for x in r.json()["results"]}
    # A ranking answers every document; a selection the ones it picks (not the orthogonal one).
    assert {0, 1} <= got.keys() <= want.keys() and (extra or len(got) == 3), got
    assert all(abs(got[i] - want[i]) < 1e-5 for i in got), got
  refused(post(url, {**body, "embeddings": (e * 1e39).tolist()}), 422, "embeddings")


def test_max_per_group_zero_is_refused_by_the_server_and_the_library(url, pipe):
  err = refused(post(url, {"query": "x", "documents": DOCS, "max_per_group": 0}), 422,
                "max_per_group")
  assert "greater than or equal to 1" in err["message"]
  with pytest.raises(ValueError, match=r"`max_per_group`=0 keeps no passage"):
    pipe.replace(method="naive").select(QUERY, DOCS, budget=200, max_per_group=0)


@pytest.mark.parametrize("granularity", ["passage", "sentence"])
def test_max_per_group_without_groups_caps_each_document_as_the_library_does(url, pipe,
                                                                             granularity):
  body = {"query": QUERY, "documents": DOCS, "budget_tokens": 150, "method": "naive",
          "max_per_group": 1, "granularity": granularity, "return_documents": False}
  r = post(url, body)
  assert r.status_code == 200, r.text
  counts = pipe.tokenizer.count(DOCS)
  passages = [jaxsel.Passage(d, 0, len(d), doc=i, tokens=int(c))
              for i, (d, c) in enumerate(zip(DOCS, counts))]
  want = pipe.replace(method="naive").select(QUERY, passages, budget=150, max_per_group=1,
                                             granularity=granularity)
  assert [(x["index"], x.get("start", 0)) for x in r.json()["results"]] == \
      [(p.doc, p.start) for p in want.passages]


def test_twelve_top_n_values_compile_nothing_after_the_first(url):
  # top_n is a run-time value of the default method's solve: after one request of a shape,
  # the same request with 12 other top_n compiles no program (each was ~5 s, blocking the worker).
  from tests.compiles import CompileCounter
  body = {"query": QUERY, "documents": DOCS * 10, "budget_tokens": 120, "top_n": 3,
          "return_documents": False}
  assert post(url, body).status_code == 200
  with CompileCounter() as cc:
    for top_n in range(1, 13):
      r = post(url, {**body, "top_n": top_n})
      assert r.status_code == 200, r.text
      # top_n counts documents (the default sends parts of them under this budget)
      assert 1 <= len({x["index"] for x in r.json()["results"]}) <= top_n
  assert cc.count == 0


def test_sentence_granularity_top_n_and_pinned_count_documents(url):
  # A pinned document of four sentences with top_n 1: one document, sent whole or in parts.
  body = {"query": QUERY, "documents": DOCS, "budget_tokens": 150, "top_n": 1, "pinned": [1],
          "granularity": "sentence", "return_documents": False}
  r = post(url, body)
  assert r.status_code == 200, r.text
  assert {x["index"] for x in r.json()["results"]} == {1}
  r = post(url, {**body, "pinned": None, "top_n": 2})
  assert r.status_code == 200, r.text
  assert 1 <= len({x["index"] for x in r.json()["results"]}) <= 2


# -- offline pages -----------------------------------------------------------------------------


def test_docs_page_loads_every_asset_from_the_server(url):
  import re
  page = httpx.get(url + "/docs", timeout=10)
  assert page.status_code == 200
  assets = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?["']([^"']+)["']""", page.text)
  assets = [a or b for a, b in assets]
  assert len(assets) >= 4  # the script, the stylesheet, the icon, the OpenAPI document
  for asset in assets:
    assert asset.startswith("/") and not asset.startswith("//"), asset  # this server's
    r = httpx.get(url + asset, timeout=10)
    assert r.status_code == 200 and r.content, asset
  assert '"validatorUrl": null' in page.text
  assert "Apache License" in httpx.get(url + "/static/LICENSE", timeout=10).text


def test_docs_site_diagrams_need_no_cdn():
  """Material loads Mermaid from a CDN unless `mermaid` is defined: the site ships its own."""
  import yaml
  with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
    config = yaml.load(f, Loader=yaml.BaseLoader)  # no tags: the file names Python objects
  scripts = config["extra_javascript"]
  assert all("://" not in s for s in scripts)
  path = os.path.join(ROOT, "docs", "assets", "javascripts", "mermaid.min.js")
  assert "assets/javascripts/mermaid.min.js" in scripts
  with open(path, "rb") as f:
    f.seek(-200, os.SEEK_END)
    assert b'globalThis["mermaid"]' in f.read()
  assert os.path.exists(os.path.join(ROOT, "docs", "assets", "javascripts", "mermaid.LICENSE"))

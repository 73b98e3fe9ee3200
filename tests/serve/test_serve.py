"""`jaxsel serve` on a real loopback server: the Cohere SDK, LlamaIndex's and LangChain's Cohere
rerank postprocessors, raw HTTP for the extensions and errors, a bounded load test (each answer
equal to its one-at-a-time answer), graceful shutdown, and the docs page's curl examples run
against the `jaxsel serve` command with the real MiniLM."""

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

import jaxsel
from jaxsel import serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = "cats dogs birds fish cows horses owls bees frogs goats".split()
DOCS = [f"{w} live here. the {w} eat and sleep." for w in WORDS[:6]]
BUDGET = 120  # the tiny tokenizer counts characters: about three documents


@pytest.fixture(scope="module")
def pipe():
  return jaxsel.Pipeline(jaxsel.testing.tiny_encoder())


@pytest.fixture(scope="module")
def app(pipe):
  return serve.create_app(pipe, max_batch=8, max_documents=50, max_body_bytes=100_000)


@pytest.fixture(scope="module")
def url(app):
  with serve.background(app) as base:
    yield base


def post(url, path, body, **kw):
  return httpx.post(url + path, json=body, timeout=120, **kw)


def ranking(pipe, query, docs):
  q = pipe.embed([query], "query")[0]
  return pipe.embed(docs, "passage") @ q


def test_cohere_sdk_ranks_by_cosine(url, pipe):
  import cohere
  co = cohere.ClientV2(base_url=url, api_key="x")
  res = co.rerank(model="jaxsel", query="cats", documents=DOCS, top_n=3)
  rel = ranking(pipe, "cats", DOCS)
  assert [r.index for r in res.results] == list(np.argsort(-rel, kind="stable")[:3])
  np.testing.assert_allclose([r.relevance_score for r in res.results],
                             np.sort(rel)[::-1][:3], rtol=1e-5)


def test_llama_index_cohere_rerank(url):
  from llama_index.core.schema import NodeWithScore, TextNode
  from llama_index.postprocessor.cohere_rerank import CohereRerank
  nodes = [NodeWithScore(node=TextNode(text=d), score=0.0) for d in DOCS]
  out = CohereRerank(api_key="x", base_url=url, model="jaxsel", top_n=2).postprocess_nodes(
      nodes, query_str="dogs")
  raw = post(url, "/v2/rerank", {"query": "dogs", "documents": DOCS, "top_n": 2}).json()
  assert [n.node.get_content() for n in out] == [DOCS[r["index"]] for r in raw["results"]]


def test_langchain_cohere_rerank(url):
  from langchain_core.documents import Document
  from langchain_cohere import CohereRerank
  docs = [Document(page_content=d) for d in DOCS]
  out = CohereRerank(cohere_api_key="x", base_url=url, model="jaxsel", top_n=2).compress_documents(
      docs, "birds")
  raw = post(url, "/v2/rerank", {"query": "birds", "documents": DOCS, "top_n": 2}).json()
  assert [d.page_content for d in out] == [DOCS[r["index"]] for r in raw["results"]]


def test_jina_shape(url, pipe):
  body = {"model": "m", "query": "fish", "documents": [DOCS[0], {"text": DOCS[3]}], "top_n": 5}
  out = post(url, "/v1/rerank", body).json()
  assert out["model"] == "m" and set(out) == {"model", "usage", "results"}
  counter = pipe.tokenizer
  assert out["usage"]["total_tokens"] == counter.count_one("fish") + int(
      counter.count([DOCS[0], DOCS[3]]).sum())
  assert sorted(r["index"] for r in out["results"]) == [0, 1]
  assert all(r["document"]["text"] == [DOCS[0], DOCS[3]][r["index"]] for r in out["results"])
  out = post(url, "/v1/rerank", {**body, "return_documents": False}).json()
  assert all("document" not in r for r in out["results"])


@pytest.mark.parametrize("method", [None, "facility_location", "naive"])
def test_budget_selects_in_pick_order(url, pipe, method):
  body = {"query": "cats", "documents": DOCS, "budget_tokens": BUDGET, "method": method,
          "granularity": "passage"}
  out = post(url, "/v2/rerank", body).json()
  sel = out["selection"]
  want = pipe.replace(method=method or "corag").select(
      "cats", [jaxsel.Passage(d, 0, len(d), doc=i, tokens=int(c))
               for i, (d, c) in enumerate(zip(DOCS, pipe.tokenizer.count(DOCS)))],
      budget=BUDGET, granularity="passage")
  assert [r["index"] for r in out["results"]] == [int(i) for i in want.indices]
  assert sel["method"] == (method or "corag") and sel["budget_tokens"] == BUDGET
  assert sel["cost_tokens"] == sum(r["cost_tokens"] for r in out["results"]) <= BUDGET
  assert all("gain" in r for r in out["results"])
  if method == "facility_location":
    assert 0 < sel["certified"] <= 1
  else:
    assert sel["certified"] is None


def test_ranking_with_pinned_and_group_caps(url, pipe):
  groups = ["a", "a", "b", "b", "c", "c"]
  body = {"query": "cats", "documents": DOCS, "pinned": [5], "groups": groups, "max_per_group": 1}
  out = post(url, "/v1/rerank", body).json()
  idx = [r["index"] for r in out["results"]]
  assert idx[0] == 5 and len(idx) == 3 and len({groups[i] for i in idx}) == 3


def test_selection_with_constraints(url, pipe):
  body = {"query": "cats", "documents": DOCS, "budget_tokens": BUDGET, "pinned": [4]}
  r = post(url, "/v2/rerank", body)
  app_constraints = "pinned" in __import__("inspect").signature(pipe.select).parameters
  if app_constraints:
    assert r.status_code == 200 and r.json()["results"][0]["index"] == 4
  else:
    assert r.status_code == 422 and r.json()["error"]["field"] == "pinned"
    assert "not available in this build" in r.json()["error"]["message"]


def test_client_embeddings(url):
  rng = np.random.default_rng(0)
  e, q = rng.normal(size=(6, 5)), rng.normal(size=5)
  body = {"query": "anything", "documents": DOCS, "embeddings": e.tolist(),
          "query_embedding": q.tolist()}
  out = post(url, "/v2/rerank", body).json()
  cos = (e / np.linalg.norm(e, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
  assert [r["index"] for r in out["results"]] == list(np.argsort(-cos, kind="stable"))
  np.testing.assert_allclose([r["relevance_score"] for r in out["results"]], np.sort(cos)[::-1],
                             rtol=1e-5, atol=1e-6)
  out = post(url, "/v2/rerank", {**body, "budget_tokens": BUDGET, "method": "naive"}).json()
  assert out["selection"]["cost_tokens"] <= BUDGET and out["results"]


BAD = [
    ("malformed JSON", b'{"query": "x", "documents": [', 400, "body"),
    ("missing query", {"documents": DOCS}, 422, "query"),
    ("negative budget", {"query": "x", "documents": DOCS, "budget_tokens": -5}, 422, "budget_tokens"),
    ("fractional budget", {"query": "x", "documents": DOCS, "budget_tokens": 2.5}, 422,
     "budget_tokens"),
    ("unknown method", {"query": "x", "documents": DOCS, "method": "nope"}, 422, "method"),
    ("documents not a list", {"query": "x", "documents": "abc"}, 422, "documents"),
    ("a title not a string", {"query": "x", "documents": [{"text": "d", "title": 5}]}, 422,
     "documents[0].title"),
    ("a document object without text", {"query": "x", "documents": [{"title": "t"}]}, 422,
     "documents[0].text"),
    ("pinned out of range", {"query": "x", "documents": DOCS, "pinned": [99]}, 422, "pinned[0]"),
    ("groups of the wrong length", {"query": "x", "documents": DOCS, "groups": ["a"],
                                    "max_per_group": 1}, 422, "groups"),
    ("embeddings of the wrong shape", {"query": "x", "documents": DOCS, "embeddings": [[1.0]],
                                       "query_embedding": [1.0]}, 422, "embeddings"),
    ("budget below every document", {"query": "x", "documents": DOCS, "budget_tokens": 1}, 422,
     "budget_tokens"),
    ("too many documents", {"query": "x", "documents": ["d"] * 51}, 413, "documents"),
    ("body over the limit", {"query": "x", "documents": ["d" * 200_000]}, 413, "body"),
]


@pytest.mark.parametrize("name,body,status,field", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
def test_bad_input_names_the_field(url, path, name, body, status, field):
  if isinstance(body, bytes):
    r = httpx.post(url + path, content=body, headers={"content-type": "application/json"},
                   timeout=60)
  else:
    r = post(url, path, body)
  assert r.status_code == status, r.text
  err = r.json()["error"]
  assert err["field"] == field and err["message"]
  assert httpx.get(url + "/health", timeout=10).json()["status"] == "ok"


def test_max_tokens_per_doc_cuts_documents(url, pipe):
  body = {"query": "cats", "documents": DOCS, "budget_tokens": 40, "method": "naive",
          "max_tokens_per_doc": 10}
  out = post(url, "/v2/rerank", body).json()
  assert all(r["cost_tokens"] <= 10 for r in out["results"]) and len(out["results"]) == 4
  assert out["meta"]["tokens"]["input_tokens"] == pipe.tokenizer.count_one("cats") + 10 * len(DOCS)


def test_an_internal_error_answers_500_and_the_server_keeps_serving(url, app, monkeypatch):
  engine = app.state.engine
  outcome = engine._outcome

  def failing(p, res):
    if p.job.query == "boom":
      raise RuntimeError("boom")
    return outcome(p, res)

  monkeypatch.setattr(engine, "_outcome", failing)
  r = post(url, "/v1/rerank", {"query": "boom", "documents": DOCS})
  assert r.status_code == 500 and "RuntimeError" in r.json()["error"]["message"]
  assert post(url, "/v1/rerank", {"query": "cats", "documents": DOCS}).status_code == 200
  assert 'kind="server"' in httpx.get(url + "/metrics", timeout=10).text


def test_health_metrics_openapi(url):
  assert httpx.get(url + "/health", timeout=10).json() == {
      "status": "ok", "model": "jaxsel", "method": "corag"}
  post(url, "/v2/rerank", {"query": "x", "documents": DOCS})
  post(url, "/v2/rerank", {"query": "x", "documents": "abc"})
  text = httpx.get(url + "/metrics", timeout=10).text
  for name in ('jaxsel_serve_requests_total{endpoint="/v2/rerank",status="200"}',
               "jaxsel_serve_request_seconds_bucket", "jaxsel_serve_batch_size_bucket",
               'jaxsel_serve_errors_total{endpoint="/v2/rerank",kind="client"}'):
    assert name in text
  spec = httpx.get(url + "/openapi.json", timeout=10).json()
  props = spec["components"]["schemas"]["CohereRerankRequest"]["properties"]
  for ext in ("budget_tokens", "method", "pinned", "groups", "max_per_group", "embeddings",
              "query_embedding"):
    assert props[ext]["description"].startswith("jaxsel")
  assert httpx.get(url + "/docs", timeout=10).status_code == 200


def _load_bodies():
  """Selections by the default method and facility location, with the server embedding or
  client-sent embeddings, and plain rankings (some with a pinned document and group caps)."""
  rng = np.random.default_rng(1)
  bodies = []
  for i in range(64):
    docs = [f"{w} {rng.choice(WORDS)} number {rng.integers(100)}." for w in
            rng.choice(WORDS, size=int(rng.integers(5, 9)), replace=False)]
    body = {"query": str(rng.choice(WORDS)), "documents": docs}
    if i % 4 == 3:  # a ranking
      if i % 8 == 7:
        body.update(pinned=[1], groups=[j % 3 for j in range(len(docs))], max_per_group=2)
    else:
      body.update(budget_tokens=60, method="facility_location" if i % 2 else None)
    if i % 3 == 0:
      body.update(embeddings=rng.normal(size=(len(docs), 6)).tolist(),
                  query_embedding=rng.normal(size=6).tolist())
    bodies.append(body)
  return bodies


def test_load_batched_answers_equal_one_at_a_time(url):
  """64 requests from 32 concurrent clients, all answered, each equal to its answer alone."""
  _load(url)


@pytest.mark.slow
def test_load_with_minilm_batched_answers_equal_one_at_a_time():
  """The same with the real all-MiniLM-L6-v2 embedding on the server (32 to a batch)."""
  from jaxsel.cli.common import default_model, load_model
  app = serve.create_app(jaxsel.Pipeline(load_model(default_model())), max_batch=32,
                         warm_documents=(5, 8))
  with serve.background(app) as base:
    _load(base)


def _load(url):
  bodies = _load_bodies()
  alone = [post(url, "/v2/rerank", b).json() for b in bodies]
  before = httpx.get(url + "/metrics", timeout=10).text

  def call(b):
    with httpx.Client(timeout=120) as client:
      return client.post(url + "/v2/rerank", json=b)

  with concurrent.futures.ThreadPoolExecutor(32) as pool:
    answers = list(pool.map(call, bodies, timeout=600))
  assert all(a.status_code == 200 for a in answers)
  for a, want in zip(answers, alone):
    got = a.json()
    assert [r["index"] for r in got["results"]] == [r["index"] for r in want["results"]]
    np.testing.assert_allclose([r["relevance_score"] for r in got["results"]],
                               [r["relevance_score"] for r in want["results"]], rtol=1e-5)
    assert ("selection" in got) == ("selection" in want)
    if "selection" in want:
      assert got["selection"]["cost_tokens"] == want["selection"]["cost_tokens"]
      np.testing.assert_allclose([r["gain"] for r in got["results"]],
                                 [r["gain"] for r in want["results"]], rtol=1e-4, atol=1e-6)
  after = httpx.get(url + "/metrics", timeout=10).text
  batches = lambda t: float(re.search(r"^jaxsel_serve_batch_size_count (\S+)", t, re.M).group(1))
  assert batches(after) - batches(before) < len(bodies)  # some requests shared a batch


def test_shutdown_lets_in_flight_requests_finish(pipe):
  app = serve.create_app(pipe, max_batch=4, warm_up=False)
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    with serve.background(app) as base:
      body = {"query": "cows", "documents": DOCS, "budget_tokens": BUDGET, "method": "mmr"}
      futures = [pool.submit(post, base, "/v2/rerank", body) for _ in range(8)]
      time.sleep(2.0)  # received and in flight (mmr compiles first), then told to stop
    assert [f.result(timeout=300).status_code for f in futures] == [200] * 8


@pytest.mark.slow
def test_command_with_minilm_runs_the_docs_examples(tmp_path, server_process):
  """`jaxsel serve` (the real all-MiniLM-L6-v2) answers the Cohere SDK and every curl example of
  docs/serve.md; SIGTERM stops it after a graceful shutdown."""
  proc, base = server_process(
      lambda port: [sys.executable, "-m", "jaxsel.cli", "serve", "--port", str(port),
                    "--max-batch", "2", "--warm-documents", "2,3", "--no-compile-cache",
                    "--max-programs", "24"], ROOT)
  port = int(base.rsplit(":", 1)[1])
  try:
    import cohere
    res = cohere.ClientV2(base_url=base, api_key="x").rerank(
        model="jaxsel", query="Which river flows through Paris?",
        documents=["Berlin lies on the Spree.", "The Seine flows through Paris."], top_n=1)
    assert res.results[0].index == 1
    page = open(os.path.join(ROOT, "docs", "serve.md"), encoding="utf-8").read()
    curls = [b for b in re.findall(r"```bash\n(.*?)```", page, re.S) if b.startswith("curl")]
    assert len(curls) >= 5
    for block in curls:
      out = subprocess.run(["bash", "-c", block.replace("127.0.0.1:8080", f"127.0.0.1:{port}")],
                           capture_output=True, text=True, timeout=300)
      answer = json.loads(out.stdout)
      assert "error" not in answer and answer["results"], (block, answer)
      if "budget_tokens" in block:
        assert answer["selection"]["cost_tokens"] <= 20
    for block in re.findall(r"```py\n(.*?)```", page, re.S):
      code = block.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
      out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, cwd=str(tmp_path))
      assert out.returncode == 0 and out.stdout.split()[0] == "0", out.stderr[-2000:]
    # --max-programs 24: the warm-up alone loads more, so the server freed its programs (and
    # answered everything above after that).
    frees = re.search(r"^jaxsel_serve_compiled_program_frees (\S+)$",
                      httpx.get(base + "/metrics").text, re.M)
    assert frees and float(frees.group(1)) >= 1
  finally:
    proc.send_signal(signal.SIGTERM)
    try:
      rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
      proc.kill()
      raise
  log = proc.stdout.read().decode(errors="replace")
  # uvicorn shuts down gracefully, then re-raises the signal it caught (exit by SIGTERM).
  assert rc in (0, -signal.SIGTERM) and "Application shutdown complete" in log, log[-3000:]


def test_a_batch_counts_its_texts_together_and_a_bad_job_fails_alone(pipe):
  """The engine counts a batch's texts in one tokenizer call; a job whose text the counter
  refuses (a lone surrogate) gets its own error while the others get their lone answers."""
  from jaxsel.serve.engine import Engine, Job
  eng = Engine(pipe, max_batch=8)
  jobs = [Job(w, tuple(DOCS), select=True, budget=BUDGET) for w in WORDS[:3]]
  bad = Job("cats", ("fine text.", "broken \ud800 text."), select=True, budget=BUDGET)
  outs = eng.run([jobs[0], bad, jobs[1], jobs[2]])
  assert isinstance(outs[1], ValueError) and "texts" in str(outs[1])
  for job, out in zip(jobs, [outs[0], outs[2], outs[3]]):
    alone = eng.run([job])[0]
    assert [(p.index, p.cost, p.gain) for p in out.picks] == \
        [(p.index, p.cost, p.gain) for p in alone.picks]
    assert out.total_tokens == alone.total_tokens == pipe.tokenizer.count(
        [job.query, *job.texts]).sum()

"""`training/agent_menu.py`: requests are flattened with their features, yes/no questions (NaN
answer-in-context) left out; labels go to the best entry with ties to the best fixed one; an
agent trained on requests whose best entry depends on a request feature (the budget) learns it
and beats the best fixed entry on held-out requests, which a query embedding alone could not;
one that reads the entries' outcomes learns a choice that only the outcomes show."""

import numpy as np

from training import agent_menu


def _set(rng, q_n=40, dim=8):
  """Synthetic outcomes: entry 0 answers at small budgets only, entry 1 at large ones, the rest
  never; each question's 6 requests (2 forms x 3 budgets)."""
  k_n, r_n = len(agent_menu.MENU), 6
  budget = np.tile([-1.0, 0.0, 0.6], 2)  # log2(budget / 256) of each request
  aic = np.zeros((q_n, k_n, r_n), np.float32)
  aic[:, 0, :] = budget < 0
  aic[:, 1, :] = budget >= 0
  feats = np.zeros((q_n, r_n, len(agent_menu.REQUEST_FEATURES)), np.float32)
  feats[:, :, 0] = budget
  feats[:, :, 1] = np.repeat([1.0, 0.0], 3)
  feats[:, :, 2:] = rng.normal(size=(q_n, r_n, 3))
  query = rng.normal(size=(q_n, dim)).astype(np.float32)
  query /= np.linalg.norm(query, axis=1, keepdims=True)
  return {"aic": aic, "sf": np.full_like(aic, np.nan), "para": aic.copy(), "query": query,
          "features": feats}


def test_requests_leave_out_questions_without_an_answer_string():
  data = _set(np.random.default_rng(0), q_n=3)
  data["aic"][1] = np.nan  # a yes/no question
  everything = tuple(range(len(agent_menu.MENU)))
  x, score, aic, question = agent_menu._requests(data, everything, ("query", "request"))
  assert x.shape == (12, 8 + len(agent_menu.REQUEST_FEATURES)) and set(question) == {0, 2}
  np.testing.assert_allclose(x[:6, 8], [-1.0, 0.0, 0.6, -1.0, 0.0, 0.6], rtol=1e-6)
  np.testing.assert_allclose(score, aic * 1.1)
  np.testing.assert_array_equal(agent_menu.per_question(np.arange(12.0), question), [2.5, 8.5])


def test_the_agent_learns_a_choice_that_depends_on_the_request():
  rng = np.random.default_rng(0)
  train, test = [_set(rng) for _ in range(2)], _set(rng, q_n=30)
  r = agent_menu.fold(train, test, epochs=30, n_resamples=200)
  assert r["fixed_name"] == agent_menu.NAMES[1]  # 4 of 6 requests
  assert r["labels"][agent_menu.NAMES[0]] == 2 * 40 * 2 and r["labels"][agent_menu.NAMES[1]] == 2 * 40 * 4
  assert abs(r["fixed"].mean() - 4 / 6) < 1e-6 and abs(r["oracle"].mean() - 1.0) < 1e-6
  assert r["agent"].mean() > 0.95 and r["vs_fixed"]["low"] > 20


def test_the_agent_reads_the_entries_outcomes():
  """The better of two entries is the one whose context holds the question's words (an outcome
  feature); neither the query nor the request says which. Only an agent given the outcomes
  finds it, over a sub-menu of two entries."""
  rng = np.random.default_rng(1)

  def with_outcomes(data):
    q_n, k_n, r_n = data["aic"].shape
    good = rng.integers(0, 2, size=(q_n, r_n))  # which of entries 0 and 1 answers
    aic = np.zeros_like(data["aic"])
    aic[:, 0] = good == 0
    aic[:, 1] = good == 1
    out = rng.normal(size=(q_n, r_n, k_n, 9)).astype(np.float32)
    out[:, :, 0, 4] = (good == 0) + 0.1 * rng.normal(size=good.shape)
    out[:, :, 1, 4] = (good == 1) + 0.1 * rng.normal(size=good.shape)
    docs = np.empty((q_n, r_n, k_n), object)
    for i in np.ndindex(docs.shape):
      docs[i] = frozenset(rng.choice(10, 3, replace=False).tolist())
    return {**data, "aic": aic, "para": aic.copy(), "outcomes": out, "docs": docs}

  train, test = [with_outcomes(_set(rng)) for _ in range(2)], with_outcomes(_set(rng, q_n=30))
  blind = agent_menu.fold(train, test, entries=(0, 1), inputs=("query", "request"), epochs=30,
                          n_resamples=200)
  seeing = agent_menu.fold(train, test, entries=(0, 1), inputs=("request", "outcomes"),
                           epochs=30, n_resamples=200)
  assert set(seeing["entries"]) == {agent_menu.NAMES[0], agent_menu.NAMES[1]}
  ranker = agent_menu.fold(train, test, entries=(0, 1), inputs=("request", "outcomes"),
                           chooser="ranker", n_resamples=200)
  assert blind["agent"].mean() < 0.7 and seeing["agent"].mean() > 0.9
  assert seeing["vs_fixed"]["low"] > 20 and ranker["agent"].mean() > 0.9

"""The Pipeline, one module per job: `config` (every setting, frozen), `candidates` (documents,
passages or an index -> a checked request), `embedding` (prompts, the one cache, late chunks),
`solve` (the compiled, shape-bucketed, batched selection), `selection` (the `Pipeline`:
`select`, `select_many`, `answer`), `result` (what a request returns)."""

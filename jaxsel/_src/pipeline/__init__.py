"""The Pipeline: `config` (every setting, frozen), `pipeline` (candidates, embeddings, method
dispatch through the registry), `solve` (the compiled, shape-bucketed selection), `result`
(what a request returns)."""

"""Monotone submodular objectives in three forms, one module each:

* `dense` — facility location, coverage, saturated coverage on an `[N, N]` similarity;
* `matrix_free` — the same on the cosine similarity of embeddings `[N, D]`, rows recomputed
  in blocks (no `[N, N]` matrix);
* `knn` — the same on a sparse kNN graph `[N, m]`, and the exact blocked graph itself.

`rows` holds the coverage arithmetic they share, `cover_kernel` the C++ greedy kernels'
wrappers beside it (their `ffi_call`s, and a `custom_vjp` that differentiates `rows`), `blocks` the block-at-a-time machinery of the two large forms. Each class implements
`jaxsel.Objective` and declares the axes of its fields that run over candidates
(`candidate_axes`), which is all candidate-parallel sharding needs to know.
"""

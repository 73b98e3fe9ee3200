"""Flax nnx ports of BERT-family encoders and cross-encoders that load Hugging Face checkpoints:
`config` (frozen model config), `bert` (the modules), `attention` (XLA attention and token
packing), `attention_kernel` (the C++ CPU attention beside it: its `ffi_call` and a
`custom_vjp` that differentiates the XLA one), `batching` (length buckets, compiled entry
points), `loading` (strict checkpoint loading, the offline default model), `sentence`
(`SentenceEncoder`, `load_encoder`), `cross` (`CrossEncoder`, `load_cross_encoder`)."""

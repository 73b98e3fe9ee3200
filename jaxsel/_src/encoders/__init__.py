"""Flax nnx ports of BERT-family encoders and cross-encoders that load Hugging Face checkpoints:
`config` (frozen model config), `bert` (the modules), `attention` (XLA attention and token
packing; the CPU kernel is `native.attention`), `batching` (length buckets, compiled entry
points), `loading` (strict checkpoint loading, the offline default model), `sentence`
(`SentenceEncoder`, `load_encoder`), `cross` (`CrossEncoder`, `load_cross_encoder`)."""

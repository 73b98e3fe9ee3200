"""The configuration agent: `model` (the Siamese MLP, its loss, saving and loading), `train`
(the optax training loop with resumable orbax checkpoints) and `features` (what it reads)."""

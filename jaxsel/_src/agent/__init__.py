"""The configuration agent, split the way gemma splits a model: `config` (the frozen
`AgentConfig`, the settings' encoding, the decoded `SearchChoice`), `model` (the Siamese MLP,
`ConfigAgent`, a `jaxsel.contrib.Configurator`), `loss` (contrastive + cross-entropy + squared
error), `train` (the optax loop with resumable orbax checkpoints), `params` (saving and loading the
weights, strictly and checksummed) and `features` (what it reads of a request)."""

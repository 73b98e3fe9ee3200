"""QA research code: data, features, labels for the configuration agent, evaluation. Scripts
(`label_queries.py`, `train_agent.py`, `evaluate.py`) run from the repository; the `jaxsel`
package never imports this folder."""

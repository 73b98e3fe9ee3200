"""jaxsel inside the RAG frameworks people already run: thin adapters over `jaxsel.Pipeline`.

Each adapter lives in its own module and imports its framework there, so importing this
package imports none of them:

* `jaxsel.integrations.llama_index.JaxselNodePostprocessor`: a LlamaIndex
  `BaseNodePostprocessor` (``pip install "jaxsel[llama-index]"``);
* `jaxsel.integrations.langchain.JaxselCompressor`: a LangChain `BaseDocumentCompressor`,
  usable in `ContextualCompressionRetriever` (``pip install "jaxsel[langchain]"``);
* `jaxsel.integrations.haystack.JaxselRanker`: a Haystack ``@component`` ranker with
  ``run(query, documents)`` (``pip install "jaxsel[haystack]"``).

Each takes the retrieved nodes / documents and returns the ones selected within a token
`budget` by `method` (``"facility_location"``, ``"saturated_coverage"``, ``"mmr"``,
``"corag"`` or ``"naive"``), in their input order (``order="input"``) or in pick order
(``order="selection"``), as copies carrying jaxsel's relevance score; the inputs are never
changed. Token costs come from `tokenizer` (a callable `text -> int` or `text -> tokens`, or
anything `jaxsel.token_counter` takes), by default the pipeline's (the jaxsel encoder's word
pieces): the same count as `Pipeline.tokenizer`. The default method is CORAG (the adapters
always have a query).

Embeddings the framework already has (LlamaIndex node embeddings and
`QueryBundle.embedding`, Haystack `Document.embedding`, LangChain embeddings stored in the
documents' metadata) are used instead of embedding the texts again, when every candidate has
one. They must come from the same model family as the query embedding: when the query is
embedded by jaxsel's encoder, a dimension other than the encoder's raises a `ValueError`
instead of mixing two models' vectors.
"""

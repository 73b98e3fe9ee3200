"""The `jaxsel` command: select passages for an LLM's context from files, from an index, or
from the bundled demo document.

    jaxsel select FILE... [--query Q ...] [--budget TOKENS] [--method M] [--json] [--plot curve.png]
    jaxsel index build DIR/FILES... --out INDEX
    jaxsel index search INDEX --query Q [--query Q ...] --budget B
    jaxsel ask QUESTION FILE... [--budget TOKENS] [--generator MODEL | --gguf FILE |
               --openai-url URL --openai-model NAME [--openai-key-env VAR]] [--show-context]
    jaxsel demo [--no-answer]

Without a query, `select` does text selection (coverage of the document's sentences); with
queries it reranks passages. Output is a table (or the LLM prompt with `--prompt`, or JSON
with `--json`). `ask` selects the context for a question and prints an LLM's answer (default:
the offline SmolLM2-135M-Instruct; a local model folder, a GGUF file or an OpenAI-compatible
server with the options above).

The command (not the library) keeps JAX's persistent compilation cache in
`$XDG_CACHE_HOME/jaxsel/jax` (`~/.cache/jaxsel/jax`), so a second process does not compile
the encoder again, and the passage embeddings of its input files in
`$XDG_CACHE_HOME/jaxsel/embeddings`, so a second run on unchanged files embeds only the
queries; both folders are safe to delete at any time. `--no-compile-cache` or
`JAXSEL_COMPILE_CACHE=0` turns the first off, `--no-embedding-cache` or
`JAXSEL_EMBEDDING_CACHE=0` the second; `JAXSEL_COMPILE_CACHE=/some/folder` (or
`JAXSEL_EMBEDDING_CACHE=...`) moves it.

Exit status: 0 on success, 1 for bad input (a missing file, empty input, a
budget below the smallest passage, a corrupt index, a --plot or --out path that cannot be
written), 2 for a bad command line (an unknown option or method, a bad option value), 141 when
the reader of the output goes away (`| head`). Bad input is a one-line message, never a
traceback, and paths and values are checked before any work.

A damaged entry of the compilation cache (a process killed while writing it) is JAX's to handle:
it warns and compiles the program again; delete the folder to be rid of it.

The package: `common` (settings, caches, models, input, the checks made before any work),
`commands` (one function per command), `main` (the parser and `main`).
"""

from jaxsel.cli import commands, common
from jaxsel.cli.common import (DEMO_DOCUMENT, DEMO_QUESTIONS, LARGE_INPUT_CHARS, CLIError,
                               announce_large_input, compile_cache_dir, default_model, duration,
                               embedding_cache_dir, embedding_rate, enable_compile_cache,
                               load_answer_model, load_model, read_documents, reader_tokenizer)
from jaxsel.cli.main import build_parser, main

__all__ = ["CLIError", "DEMO_DOCUMENT", "DEMO_QUESTIONS", "LARGE_INPUT_CHARS",
           "announce_large_input", "build_parser", "commands", "common", "compile_cache_dir",
           "default_model", "duration", "embedding_cache_dir", "embedding_rate",
           "enable_compile_cache", "load_answer_model", "load_model", "main", "read_documents",
           "reader_tokenizer"]

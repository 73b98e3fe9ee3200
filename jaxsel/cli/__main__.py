"""`python -m jaxsel.cli`: the `jaxsel` command."""

from jaxsel.cli.main import entry

entry()

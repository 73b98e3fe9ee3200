"""jaxsel's private implementation. Import the public API from `jaxsel`."""

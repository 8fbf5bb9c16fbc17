"""Testing tooling: the pytest plugin that runs a test once per backend (``plugin``, the
``pytest11`` entry point ``alpyka``; docs/testing.md)."""

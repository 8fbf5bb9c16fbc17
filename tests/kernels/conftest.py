"""Kernel tests: skip backends whose launch is not implemented yet (with that reason)."""

import pytest

import portable as pk
from portable._backend import Backend


@pytest.fixture(autouse=True)
def _backend_can_launch(request):
    if "backend" not in request.fixturenames:
        return
    name = request.getfixturevalue("backend")
    if name is not None and type(pk.get_backend(name)).launch is Backend.launch:
        pytest.skip(f"backend {name} cannot launch kernels yet (no emitter for it)")

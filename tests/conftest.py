"""The test matrix: fixtures ``backend``/``device``/``queue`` come from alpyka's pytest plugin."""

from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]
# An installed alpyka registers the plugin as a pytest11 entry point; a source checkout run
# with PYTHONPATH=. (as on the GPU machine) loads it here instead.
if not any(ep.name == "alpyka" for ep in entry_points(group="pytest11")):
    pytest_plugins.append("portable.pytest_plugin")


@pytest.fixture(scope="session")
def demo_model_dir(tmp_path_factory):
    """The demo's edge classifier, trained once per session (seeded) into a private directory."""
    pytest.importorskip("torch", reason="the demo needs torch (pip install -e '.[torch]')")
    from inference.demo import train

    d = tmp_path_factory.mktemp("models")
    model, loss = train.train(n_events=120, epochs=6, log=False)
    assert loss < 0.2, f"training did not converge: loss {loss}"
    train.save(model, d)
    return d


def _enable_cuda_compile_guard() -> None:
    """Where NVRTC is installed (the test extra), every OpenCL kernel the suite builds is also
    compiled as CUDA C to PTX, so a CUDA dialect error fails the suite even without a GPU."""
    import os

    try:
        from backends._c_build import nvrtc_available
    except ImportError:
        return
    if nvrtc_available() is None:
        os.environ.setdefault("ALPYKA_CHECK_CUDA", "1")


_enable_cuda_compile_guard()

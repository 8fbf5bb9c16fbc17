"""The test matrix: fixtures ``backend``/``device``/``queue`` come from alpyka's pytest plugin."""

from importlib.metadata import entry_points

pytest_plugins = ["pytester"]
# An installed alpyka registers the plugin as a pytest11 entry point; a source checkout run
# with PYTHONPATH=. (as on the GPU machine) loads it here instead.
if not any(ep.name == "alpyka" for ep in entry_points(group="pytest11")):
    pytest_plugins.append("portable.pytest_plugin")

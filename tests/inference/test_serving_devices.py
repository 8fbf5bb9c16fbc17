"""A server's device string (``serve(..., device=)``, ``alpyka serve --device``): one parser for
the torch device of plain models and the alpyka device of pipelines."""

from __future__ import annotations

import pytest

import portable as pk
from inference.serving import DeviceStringError, server_devices
from inference.serving._device import backend_of, parse_device

BAD = ["gpu", "cuda:x", "cpu:", "cpu_serial:-1", "cpu_serial:1:2", "", "CPU"]


def test_device_strings_name_a_backend_and_an_index():
    assert parse_device("cpu") == ("cpu", None)
    assert parse_device("cpu_serial:0") == ("cpu_serial", 0)
    assert parse_device("cuda:3") == ("cuda", 3)
    assert backend_of("cpu") == (pk.host().backend_name, 0)
    assert backend_of("cpu_threads") == ("cpu_threads", 0)
    assert server_devices("cpu") == ("cpu", "cpu")
    assert server_devices("cpu_serial") == ("cpu", "cpu_serial")  # a host backend: torch on the CPU


@pytest.mark.parametrize("device", BAD)
def test_a_bad_device_string_is_one_clear_error_for_models_and_pipelines(device):
    """Both readers of the string (the server's plain models, a pipeline's runner) refuse it the
    same way, naming what the string may be; the pipeline runner's used to fail on ``int()``."""
    for read in (parse_device, server_devices, backend_of):
        with pytest.raises(DeviceStringError, match=r"device must be 'cpu', 'cuda\[:N\]' or an alpyka backend") as info:
            read(device)
        assert isinstance(info.value, ValueError) and isinstance(info.value, pk.AlpykaError)
        assert repr(device) in str(info.value)

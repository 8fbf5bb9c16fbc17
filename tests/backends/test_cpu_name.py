"""The CPU devices' name comes from /proc/cpuinfo's ``model name`` whatever characters it holds:
trademark marks, ``@``, and bytes that are not UTF-8 (a hypervisor's model name)."""

from __future__ import annotations

import pytest

from backends import _host


@pytest.mark.parametrize(
    "raw, want",
    [
        (b"Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"),
        (b"AMD EPYC 7B13 64-Core Processor", "AMD EPYC 7B13 64-Core Processor"),
        (b"QEMU \xae Virtual CPU version 2.5+", "QEMU \ufffd Virtual CPU version 2.5+"),
        (b"", None),
    ],
)
def test_model_name_survives_odd_names(tmp_path, raw, want):
    """A model name that is not UTF-8 raised UnicodeDecodeError in cpu_name(), which made
    cpu_serial and cpu_threads unavailable ("failed to load"); an empty one named the devices ""."""
    info = tmp_path / "cpuinfo"
    info.write_bytes(b"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: " + raw + b"\nflags\t\t: fpu\n")
    assert _host.model_name(str(info)) == want


def test_no_cpuinfo_is_no_name(tmp_path):
    assert _host.model_name(str(tmp_path / "absent")) is None
    assert _host.cpu_name()  # this machine's: never empty

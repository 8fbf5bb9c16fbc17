"""The event kernels of examples/dimuon_mass.py (the one copy of them) for the data tests
(tests/data_io): ``from alpyka_testing.data import ...``.

Dask workers unpickle the kernels by their module's name, ``dimuon_mass``: importing this module
puts the examples directory on sys.path (the one sys.path edit the data tests need), before any
worker starts; spawned workers inherit the parent's sys.path, the repository root (where this
package lives) and the examples directory with it."""

import sys
from pathlib import Path

_EXAMPLES = str(Path(__file__).resolve().parents[1] / "examples")
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)

from dimuon_mass import (  # noqa: E402
    Leptons,
    branches,
    reference_four_lepton,
    reference_pair_masses,
    run_four_lepton,
    run_pair_masses,
)

BRANCHES = branches("Muon")

__all__ = [
    "BRANCHES",
    "Leptons",
    "branches",
    "reference_four_lepton",
    "reference_pair_masses",
    "run_four_lepton",
    "run_pair_masses",
]

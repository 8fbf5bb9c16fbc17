"""The event kernels of examples/dimuon_mass.py (the one copy of them) for the data tests: a
plain module, so Dask workers import it by name (the examples directory goes on sys.path
before any worker starts, and spawned workers inherit the path)."""

import sys
from pathlib import Path

_EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples")
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)

from dimuon_mass import (  # noqa: E402
    Leptons, branches, reference_four_lepton, reference_pair_masses, run_four_lepton, run_pair_masses,
)

BRANCHES = branches("Muon")

__all__ = ["BRANCHES", "Leptons", "branches", "reference_four_lepton", "reference_pair_masses", "run_four_lepton",
           "run_pair_masses"]

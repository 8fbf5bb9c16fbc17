"""The data extras stay optional: ``import portable`` imports none of them, and a missing one is an
ImportError that names the extra to install."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_import_portable_imports_no_data_extra():
    r = _run(
        "import sys, portable as pk; pk.distributed; pk.from_awkward; pk.read_root\n"
        "print(sorted(m for m in ('awkward', 'uproot', 'dask', 'distributed', 'torch') if m in sys.modules))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_missing_extra_names_it():
    r = _run(
        "import sys\nfor m in ('awkward', 'uproot', 'distributed'): sys.modules[m] = None\n"
        "import numpy as np, portable as pk, soa\n"
        "class L(soa.Layout):\n    x = soa.column(np.float32)\n"
        "for call in (lambda: pk.from_awkward(L, [], pk.host()),\n"
        "             lambda: pk.read_root('f.root', 't', L, pk.host()),\n"
        "             lambda: pk.distributed.run(print, [1])):\n"
        "    try:\n        call()\n    except ImportError as e:\n        print(e)\n"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3 and all("pip install 'alpyka[data]'" in ln for ln in lines), lines
    assert [ln.split()[0] for ln in lines] == ["awkward", "uproot", "distributed"]

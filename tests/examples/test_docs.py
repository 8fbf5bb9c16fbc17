"""Docs are code: every Python block of README.md, CONTRIBUTING.md and docs/*.md runs, page by
page, top to bottom in one script (a block may build on the blocks above it on its page). A block whose first line
is ``# fragment`` is an excerpt that cannot run alone (it serves a pipeline defined in the same
script, or starts a Dask cluster at the top level); at most one block in five may be one. A page
whose code needs an optional package (:data:`NEEDS`) is skipped where one is missing, naming it
and the extra that installs it."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FRAGMENT = "# fragment"

#: the optional modules each page's code needs (a server started by ``serve`` imports pytriton in
#: its own process), and the extra that installs each (``pip install -e '.[extra]'``)
NEEDS = {
    "README.md": ("torch", "pytriton", "tritonclient"),
    "data.md": ("awkward", "uproot", "distributed", "skhep_testdata"),
    "inference.md": ("torch",),
    "remote.md": ("torch", "pytriton", "tritonclient"),
}
EXTRAS = {
    "torch": "torch",
    "pytriton": "triton",
    "tritonclient": "triton",
    "awkward": "data",
    "uproot": "data",
    "distributed": "data",
    "skhep_testdata": "test",
}


def missing_modules(page: Path) -> list[str]:
    """The modules of :data:`NEEDS` this page's code needs and this Python cannot import."""
    return [m for m in NEEDS.get(page.name, ()) if importlib.util.find_spec(m) is None]


def blocks(page: Path) -> list[str]:
    return [m.group(1) for m in _BLOCK.finditer(page.read_text())]


def is_fragment(code: str) -> bool:
    return code.lstrip().startswith(FRAGMENT)


def test_at_most_one_block_in_five_is_a_fragment():
    every = [(p.name, b) for p in PAGES for b in blocks(p)]
    fragments = [name for name, b in every if is_fragment(b)]
    assert every, "no Python blocks found"
    assert len(fragments) * 5 <= len(every), f"{len(fragments)} fragments of {len(every)} blocks: {fragments}"


def test_the_needs_name_pages_and_extras():
    assert set(NEEDS) <= {p.name for p in PAGES} and {m for ms in NEEDS.values() for m in ms} <= set(EXTRAS)


#: a page's script may build an AOTInductor package (inference.md: ~20 s with torch's inductor
#: cache warm, ~50 s cold on 2 busy cores, minutes with every core taken): the child's own limit,
#: and the test's a minute longer, so a slow page fails with its output and never kills the worker
PAGE_TIMEOUT_S = 600


@pytest.mark.timeout(PAGE_TIMEOUT_S + 60)
@pytest.mark.parametrize("page", [p for p in PAGES if any(not is_fragment(b) for b in blocks(p))], ids=lambda p: p.name)
def test_the_pages_python_runs_as_written(page, tmp_path):
    missing = missing_modules(page)
    if missing:
        extras = ",".join(sorted({EXTRAS[m] for m in missing}))
        pytest.skip(f"{page.name} needs {', '.join(missing)}: pip install -e '.[{extras}]'")
    code = "\n\n".join(b for b in blocks(page) if not is_fragment(b))
    script = tmp_path / f"{page.stem.lower()}_page.py"  # a real file: kernels are compiled from their source
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("ALPYKA_BACKENDS", None)
    done = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=PAGE_TIMEOUT_S
    )
    assert done.returncode == 0, f"{page.name} does not run as written:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


def _lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip())


def test_the_stated_line_counts_of_the_dimuon_comparison():
    """docs/data.md compares one analysis written with alpyka and with awkward + numba: the
    figures it states are the blocks' own, and alpyka stays within 1.5x."""
    page = ROOT / "docs" / "data.md"
    found = {
        name: _lines(b) for b in blocks(page) for name in ("dimuon_mass", "dimuon_mass_numba") if f"def {name}(" in b
    }
    stated = re.search(r"alpyka (\d+), awkward \+ numba (\d+) \(([\d.]+)x\)", " ".join(page.read_text().split()))
    assert stated, "docs/data.md no longer states the line counts"
    alpyka, numba = found["dimuon_mass"], found["dimuon_mass_numba"]
    assert (int(stated[1]), int(stated[2]), float(stated[3])) == (alpyka, numba, round(alpyka / numba, 1))
    assert alpyka <= 1.5 * numba

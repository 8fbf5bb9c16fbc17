"""Docs point at what exists: every repository path that README.md, CONTRIBUTING.md, docs/*.md or
a comment of pyproject.toml or of a package's ruff.toml names (``portable/spi.py``,
``backends/emulator/``, a glob such as ``tests/kernels/test_*.py``), every test file named by its
bare name (``test_layering.py``) and every relative link with its ``#anchor``, so a file moved or
renamed, or a section retitled, cannot leave a stale pointer behind; and nothing cites a file that
is not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "pyproject.toml",
    *sorted(ROOT.glob("*/ruff.toml")),
]
#: files that are not in the repository: the project stands alone, so nothing in it may point there
OUTSIDE = re.compile(r"\bDESIGN\.md\b|\bREFERENCE\.md\b|\.\./shared\b")

#: the repository's top-level folders: a path that starts with one of them is a pointer into the tree
TOP = (
    "alpyka_demo",
    "alpyka_testing",
    "backends",
    "benchmarks",
    "docs",
    "examples",
    "inference",
    "portable",
    "soa",
    "tests",
    ".ci",
)
#: names that stand for any file in the prose ("a timeout in tests/x.py::test_y"), not a pointer
PLACEHOLDERS = {"tests/x.py"}

_PATH = re.compile(r"(?<![\w./$~-])((?:\.\./)*(?:" + "|".join(re.escape(t) for t in TOP) + r")(?:/[\w.*-]+)+/?)")
_TEST_FILE = re.compile(r"(?<![\w./-])(test_\w+\.py)\b")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```")


def _text(page: Path) -> str:
    """What of ``page`` is written for a reader: a TOML file's comments, a Markdown page whole."""
    text = page.read_text()
    if page.suffix == ".toml":
        return "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    return text


#: a folder Python makes beside the code it runs: a page may name one (where a cache is kept)
#: that a fresh clone does not have yet
GENERATED = "/__pycache__"


def _exists(page: Path, path: str) -> bool:
    """``path`` (from the repository root, or from the page when it starts with ``../``) names a
    file or folder of the checkout; a glob names at least one. A path through a folder Python
    makes at run time (:data:`GENERATED`) names the folder that holds it: whether the checkout ran
    the code there (and so has it) is not the page's to say."""
    path = path.rstrip(".")  # the end of a sentence
    path = path.partition(GENERATED)[0]
    base = page.parent if path.startswith("../") else ROOT
    if "*" in path:
        return any(base.glob(path))
    return (base / path).exists()


def stale_paths(page: Path) -> list[str]:
    """The repository paths ``page`` names that do not exist."""
    found = {m.group(1) for m in _PATH.finditer(_text(page))}
    return sorted(p for p in found - PLACEHOLDERS if not _exists(page, p))


def stale_test_files(page: Path) -> list[str]:
    """The test files ``page`` names by their bare name (``test_x.py``) that no folder of tests/ has."""
    tests = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    return sorted({m.group(1) for m in _TEST_FILE.finditer(_text(page))} - tests)


def slug(heading: str, seen: dict[str, int]) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces
    as ``-``; a repeated one gets ``-1``, ``-2``..."""
    base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (lines in code blocks are not headings)."""
    seen: dict[str, int] = {}
    out, in_code = set(), False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6}\s+(.*)", line)):
            out.add(slug(m.group(1), seen))
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file, or whose ``#anchor`` in it, does not exist."""
    broken = []
    for target in {m.group(1) for m in _LINK.finditer(page.read_text())}:
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    return sorted(broken)


_PAGES = [p for p in PAGES if p.exists()]


def test_the_pages_exist():
    """README.md, CONTRIBUTING.md and pyproject.toml are checked by name: a rename must follow here."""
    assert [p for p in PAGES if not p.exists()] == []


@pytest.mark.parametrize("page", _PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page):
    assert stale_paths(page) == [], f"{page.name} names files that do not exist"
    assert stale_test_files(page) == [], f"{page.name} names test files that do not exist"


@pytest.mark.parametrize("page", [p for p in _PAGES if p.suffix == ".md"], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == [], f"{page.name} links to files or sections that do not exist"


def _tracked_text_files() -> list[Path]:
    """The repository's own text files (sources, pages, configuration), by git when there is one."""
    suffixes = {".py", ".md", ".toml", ".txt", ".cfg", ".h", ".sh", ""}
    files = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in suffixes]
    skip = {".git", ".alpyka_cache", "__pycache__", ".pytest_cache", "build", "dist"}
    return [p for p in files if not skip & set(p.relative_to(ROOT).parts) and "egg-info" not in str(p)]


def test_nothing_cites_files_outside_the_repository():
    """The repository stands alone: no source, page or configuration cites a design file that is not
    in it (what a reader needs is in CONTRIBUTING.md and docs/)."""
    cites = []
    for path in _tracked_text_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        cites += [
            f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)
        ]
    assert cites == [], "cite CONTRIBUTING.md or docs/ instead"


def test_the_check_sees_stale_pointers(tmp_path):
    """The checks find what they are for: an old path, an old test file, a link to a missing
    file and one to a missing section."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\nSee `portable/_cli.py`, `backends/emulator/`, `tests/kernels/test_*.py`,\n"
        "test_nothing_here.py, test_layering.py, [a](missing.md), [b](#title), [c](#gone).\n"
    )
    assert stale_paths(page) == ["portable/_cli.py"]
    assert stale_test_files(page) == ["test_nothing_here.py"]
    assert broken_links(page) == ["#gone", "missing.md"]


def test_a_folder_python_makes_at_run_time_is_checked_by_the_folder_that_holds_it(tmp_path, monkeypatch):
    """CONTRIBUTING.md names ``benchmarks/__pycache__`` (where the benchmarks' numba twins are
    cached), which a fresh clone has only once a benchmark ran: the check passed or failed with
    the checkout's history. A stale folder around it is still found."""
    (tmp_path / "benchmarks").mkdir()
    monkeypatch.setitem(globals(), "ROOT", tmp_path)  # a fresh clone: no benchmark ran
    page = tmp_path / "page.md"
    page.write_text("Cached in `benchmarks/__pycache__`, not in `benchmarks/gone/__pycache__/x.nbi`.\n")
    assert stale_paths(page) == ["benchmarks/gone/__pycache__/x.nbi"]


def test_the_anchor_of_a_heading():
    seen: dict[str, int] = {}
    assert (
        slug("Checking a kernel for a GPU on a laptop (`ALPYKA_EMULATE`)", seen)
        == "checking-a-kernel-for-a-gpu-on-a-laptop-alpyka_emulate"
    )
    assert slug("`assert` and `print`", seen) == "assert-and-print"
    assert [slug("Testing", seen), slug("Testing", seen)] == ["testing", "testing-1"]

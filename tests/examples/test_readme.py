"""The README starts with the two commands, and .ci/run runs the second."""

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_starts_with_the_two_commands():
    lines = [l for l in README.read_text().splitlines() if l.strip()]
    block = lines.index("```bash")
    commands = lines[block + 1 : block + 3]
    assert commands[0].startswith('pip install -e ".[torch]" -c constraints.txt && alpyka demo')
    assert commands[1].startswith('pip install -e ".[test]" -c constraints.txt && python -m pytest')
    ci = (README.parent / ".ci" / "run").read_text()
    assert commands[1].split("#")[0].strip().replace("pip install", "pip install -q") in ci


# The README's Python blocks run as written: tests/examples/test_docs.py (every page).

"""The README's tour runs as written."""

import os
import re
import subprocess
import sys
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


def test_readme_tour_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    script = tmp_path / "readme_tour.py"  # a real file: kernels are compiled from their source
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(README.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr

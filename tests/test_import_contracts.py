"""The import contracts of pyproject.toml ([tool.importlinter]) hold: imports only point down, and no circles."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_import_contract_is_kept() -> None:
    # Run from the project root: lint-imports puts the working directory first on sys.path, so it reads this
    # checkout's packages, function-local imports included.
    assert shutil.which("lint-imports"), "lint-imports missing: pip install -e '.[test]' (import-linter)"
    done = subprocess.run(["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout

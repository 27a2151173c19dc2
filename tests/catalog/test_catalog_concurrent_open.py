"""Several processes opening one new home at the same moment (``kb serve --processes 2`` starts
two API processes and a worker at once): each must find a whole catalog, none may die on
"database is locked" or call another's half-made file damaged."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # twelve Python processes: seconds on 2 cores

OPEN_AT_GO = """
import sys, time
from pathlib import Path
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
from knowbase.service import Knowledge
from knowbase.settings import load_settings
with Knowledge(load_settings(sys.argv[1])) as kb:
    kb.check_catalog()
    print(len(kb.list_bases()))
"""


def test_processes_opening_a_new_home_together_all_get_its_catalog(tmp_path: Path) -> None:
    home, go = tmp_path / "home", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT_GO, str(home), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(12)
    ]
    time.sleep(3)  # every process imported and is polling for the go file
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == "0"

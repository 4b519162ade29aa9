"""The HTTP API keeps the contract it publishes: schemathesis, every check, against a real server.

schemathesis reads ``/openapi.json`` from a real ``rckit serve`` (conftest's tiny exported QANet,
with an index of one small file) on 127.0.0.1 and sends what the schema allows and what it forbids: every response must be
documented, match its schema and content type, no request may get a 5xx, what the schema allows
must be accepted and what it forbids refused, and a method a path does not take must get 405.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.serve.test_serve import start_server, stop_server


def schemathesis_cli() -> str:
    found = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    assert found, "schemathesis is a test dependency: pip install -e '.[test]'"
    return found


def test_the_api_keeps_its_published_schema(tiny_export, tmp_path):
    from rckit.cli import main

    (tmp_path / "docs").mkdir()  # an index, so that POST /v1/ask and GET /v1/index are tried too
    (tmp_path / "docs" / "a.txt").write_text("alpha beta gamma delta.\n\nepsilon zeta eta theta.\n")
    assert main(["index", str(tmp_path / "docs"), "--out", str(tmp_path / "docs.sqlite"), "--no-progress"]) == 0
    proc, url = start_server([str(tiny_export), "--index", str(tmp_path / "docs.sqlite")], tmp_path / "serve.log")
    try:
        run = subprocess.run([schemathesis_cli(), "run", f"{url}openapi.json", "--checks", "all",
                              "--max-examples", "60", "--seed", "1", "--request-timeout", "60", "--no-color"],
                             capture_output=True, text=True, timeout=900, cwd=tmp_path)
    finally:
        stop_server(proc)
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    assert "passed" in run.stdout.lower() or "no issues found" in run.stdout.lower(), report

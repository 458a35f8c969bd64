"""`python -m sandbox` CLI: run keeps the program's exit code and output; doctor reports."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.sandbox_helpers import require


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sandbox", *args], capture_output=True,
                          text=True, timeout=120, **kw)


def test_run_file_passes_stdin_and_exit_code(tmp_path):
    require("bwrap")
    prog = tmp_path / "prog.py"
    prog.write_text("import sys\nprint(input()[::-1])\nsys.exit(3)\n")
    (tmp_path / "in.txt").write_text("hello\n")
    out = _cli("run", str(prog), "--backend", "bwrap", "--stdin", str(tmp_path / "in.txt"))
    assert out.returncode == 3 and out.stdout == "olleh\n"
    assert "[sandbox bwrap: exit 3" in out.stderr


def test_run_json_reports_timeout(tmp_path):
    require("bwrap")
    prog = tmp_path / "loop.py"
    prog.write_text("while True:\n    pass\n")
    out = _cli("run", str(prog), "--backend", "bwrap", "--timeout", "0.5", "--json")
    res = json.loads(out.stdout)
    assert res["timed_out"] and res["exit_code"] == -9 and out.returncode == 137


def test_doctor_lists_every_backend():
    out = _cli("doctor")
    names = [line.split()[0] for line in out.stdout.splitlines() if line[:1].isalpha()]
    assert {"docker", "bwrap", "process"} <= set(names)
    assert "auto ->" in out.stdout

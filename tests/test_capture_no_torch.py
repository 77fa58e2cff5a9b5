"""Without torch, `import capture` works and the command says so in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Setting sys.modules["torch"] to None makes every `import torch` fail, as on a machine
# without it, whether or not this interpreter has torch installed.
HIDE_TORCH = "import sys; sys.modules['torch'] = None; "


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_TORCH + code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_import_without_torch():
    proc = run("import capture; print(capture.LABEL_SCHEME, capture.STAGES[0])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "tracekit-1 pre_norm\n"


def test_help_without_torch():
    proc = run("import runpy, sys; sys.argv = ['capture', '--help']; runpy.run_module('capture', run_name='__main__')")
    assert proc.returncode == 0, proc.stderr
    assert "attention" in proc.stdout and "Traceback" not in proc.stderr


def test_command_without_torch_is_one_line_error():
    proc = run(
        "import runpy, sys; sys.argv = ['capture', 'attention', '--impl', 'naive'];"
        " runpy.run_module('capture', run_name='__main__')"
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == (
        "Error: torch is not installed; capture needs it: pip install torch (or pip install 'tracekit-attn[capture]')\n"
    )


def test_api_without_torch_raises_missing_dependency():
    proc = run(
        "import capture\n"
        "try:\n"
        "    capture.run_attention('naive', out='unused')\n"
        "except capture.MissingDependencyError as e:\n"
        "    print(isinstance(e, ImportError), e)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("True torch is not installed")

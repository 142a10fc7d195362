"""mt/arguments.py: the command line's grammar: argparse's errors on one line, an unknown option named
(with the closest real one) before a missing one, and help and version without torch."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import mt_cli

ROOT = Path(__file__).resolve().parents[1]


def test_version_and_help_do_not_import_torch():
    code = (
        "import sys; from mt.cli import build_parser; p = build_parser(); p.format_help(); "
        "[c.format_help() for c in p.commands.values()]; print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert result.stdout == "False\n"
    version = mt_cli("--version")
    assert version.returncode == 0 and version.stdout == "mt 0.1.0\n"


def test_an_unknown_option_is_named_before_a_missing_one():
    result = mt_cli("translate", "--rum", "runs/toy")
    assert result.returncode == 2
    assert result.stderr == (
        "mt translate: error: unrecognized arguments: --rum runs/toy; did you mean --run?; "
        "see mt translate --help\n"
    )  # one line: the usage is one --help away
    result = mt_cli("translate")
    assert result.stderr == (
        "mt translate: error: the following arguments are required: --run; see mt translate --help\n"
    )
    result = mt_cli(
        "translate", "--run", "r", "--be\x0cam", "2"
    )  # a form feed is a line break to str.splitlines
    assert result.stderr == (
        "mt translate: error: unrecognized arguments: --be am 2; did you mean --beam?; see mt "
        "translate --help\n"
    )
    assert "--n-best" not in mt_cli("evaluate", "--help").stdout  # translate's alone
    assert "(default: runs/report.md)" in " ".join(mt_cli("report", "--help").stdout.split())

"""Every verb's --help text is locked: a flag change is a visible, reviewed diff.

The expected texts live in tests/data/cli_help/<verb>.txt. After an intended
change, regenerate them with

    STRAGGLERLAB_UPDATE_HELP=1 .venv/bin/python -m pytest tests/unit/test_cli_help.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stragglerlab.cli import VERBS, build_parser

HELP_DIR = Path(__file__).resolve().parents[1] / "data" / "cli_help"


def _help(verb: str | None, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal width
    parser = build_parser()
    if verb is None:
        return parser.format_help()
    sub = next(a for a in parser._actions if a.dest == "verb")
    return sub.choices[verb].format_help()


@pytest.mark.parametrize("verb", [None, *VERBS])
def test_help_text_is_locked(verb, monkeypatch):
    text = _help(verb, monkeypatch)
    path = HELP_DIR / f"{verb or 'stragglerlab'}.txt"
    if os.environ.get("STRAGGLERLAB_UPDATE_HELP"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: regenerate with STRAGGLERLAB_UPDATE_HELP=1"
    assert text == path.read_text(), f"`stragglerlab {verb or ''} --help` changed; see {path}"


def test_every_verb_has_quiet_and_a_folder_out(monkeypatch):
    for verb in VERBS:
        text = _help(verb, monkeypatch)
        assert "--quiet" in text, verb
        if "--out" in text:
            assert "--out DIR" in text, f"{verb}: --out must name a folder (metavar DIR)"


def test_version_and_list_from_the_console_script():
    out = subprocess.run([sys.executable, "-m", "stragglerlab", "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.startswith("stragglerlab ") and out.stdout.split()[1][0].isdigit()
    listed = subprocess.run([sys.executable, "-m", "stragglerlab", "list", "scenarios"],
                            capture_output=True, text=True, check=True).stdout
    assert "clean-dp2-pp2" in listed and "slow-worker-1" in listed

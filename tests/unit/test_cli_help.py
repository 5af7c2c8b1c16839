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


def _real_default(action) -> bool:
    """A default the help must show: not None, not an off switch, not an empty list."""
    d = action.default
    return not (d is None or d is False or d == [] or d == "==SUPPRESS==")


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_help_shows_defaults_and_an_example(verb, monkeypatch):
    """`stragglerlab <verb> --help` exits 0 with an `examples:` epilog and every flag's
    default (every verb in VERBS, so a new verb is held to it too)."""
    from stragglerlab.cli import main

    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        main([verb, "--help"])
    assert done.value.code == 0
    text = _help(verb, monkeypatch)
    assert "example" in text, f"{verb}: --help has no example (give add_parser an epilog)"
    example = text.split("example", 1)[1]
    assert f"stragglerlab {verb}" in example, f"{verb}: the example does not run the verb"
    sub = next(a for a in build_parser()._actions if a.dest == "verb").choices[verb]
    defaults = [a for a in sub._actions if a.option_strings and a.help and _real_default(a)]
    assert text.count("(default:") >= len(defaults), \
        f"{verb}: a default is not shown: {[a.option_strings[0] for a in defaults]}"

"""What a CLI verb printed on bad input: exactly one `stragglerlab VERB: error:` line."""

from __future__ import annotations


def one_error(capsys, verb: str) -> str:
    """The one error line `verb` printed to stderr (asserts no traceback, one line)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"stragglerlab {verb}: error: "), err
    return lines[0]

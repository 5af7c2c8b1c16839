"""The one error type users see: a clear message naming the input and the fix.

The CLI catches `InputError` and prints its message with exit code 2, never a
traceback.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad user input: the message names the file, the problem and what to do."""

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)

"""Utilities every floor uses: the one user-facing error (`errors.InputError`), atomic writes
and one-writer folder locks, bounded reading of the small JSON/YAML files, typed dataclasses
from parsed mappings, the plug-in registry shape, SIGTERM handling, the package version.

The bottom floor: it imports no other floor of the package.
"""

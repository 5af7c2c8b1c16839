"""Find and read Chrome-trace JSON files (torch.profiler / Kineto output), gzipped or not.

    files = find_traces("run/kineto")          # a folder's *.json, *.json.gz, or a glob
    doc = load_json(files[0])                  # dict with 'traceEvents'; InputError if bad
"""

from __future__ import annotations

import glob
import gzip
import json
import zlib
from pathlib import Path

from stragglerlab.errors import InputError

PATTERNS = ("*.json", "*.json.gz")


def find_traces(spec: str) -> list[Path]:
    """Trace files from a folder (its *.json, *.json.gz) or a glob pattern."""
    p = Path(spec)
    if p.is_dir():
        files = sorted({f for pat in PATTERNS for f in p.glob(pat) if f.is_file()})
        where = f"folder {spec}"
    else:
        files = sorted(Path(f) for f in glob.glob(spec) if Path(f).is_file())
        where = f"pattern {spec!r}"
    if not files:
        raise InputError(f"--traces: no trace files in {where}; pass the folder holding one "
                         "torch.profiler trace per rank (*.json or *.json.gz) or a glob")
    return files


def load_json(path: Path) -> dict:
    """The JSON document of a (possibly gzipped) Chrome trace; InputError when unreadable."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except OSError as e:
        raise InputError(f"cannot read the trace: {e.strerror or e}", str(path)) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(f"gzip data is truncated or corrupt ({e}); copy the file again or "
                         "re-export it with prof.export_chrome_trace", str(path)) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError(f"not valid JSON, probably truncated ({str(e).splitlines()[0]}); copy "
                         "the file again or re-export it with prof.export_chrome_trace",
                         str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError("not a Chrome trace (no 'traceEvents' list); pass files written by "
                         "torch.profiler's export_chrome_trace or tensorboard_trace_handler",
                         str(path))
    return doc

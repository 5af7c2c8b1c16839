"""A full disk under a writing verb's --out: one clear error (exit 2) naming the folder and
the room left there, nothing half-written, and the outputs written before intact.

The --out folder lies on a small tmpfs mounted in a mount namespace of the verbs' own
(`unshare -m`, or `unshare -rm` as a user), so no mount outlives the test; where neither
can be made the test is skipped, saying why. Each verb first writes its outputs with room
to spare, then the disk is filled to leave `room` bytes and the verb runs again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.fuzz_corpus import make_base
from tests.unit.general_fixtures import ddp_job

ROOT = Path(__file__).resolve().parents[2]
DISK = "8m"
"""Size of the tmpfs under --out: room for every verb's outputs."""
ROOMS = (0, 4096, 65536)
"""Bytes left free before the second run: none, a little, some."""

DRIVER = r"""
import contextlib, io, json, os, sys, traceback
from pathlib import Path
from stragglerlab.cli import main

disk, rooms, verbs = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])

def files(folder):
    return {str(p.relative_to(folder)): p.read_bytes().hex() if p.suffix != ".pdf" else ""
            for p in sorted(folder.rglob("*")) if p.is_file()}

def run(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv + ["--quiet"])
        except SystemExit as e:
            code = e.code
        except BaseException:
            code = 1
            traceback.print_exc(file=err)
    return code, err.getvalue()

def fill(room):
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    size = (disk / "filler").stat().st_size
    os.truncate(disk / "filler", max(0, size - room))

done = []
for verb, argv, out in verbs:
    first = run(argv)
    before = files(Path(out)) if Path(out).is_dir() else {}
    for room in rooms:
        fill(room)
        code, err = run(argv)
        os.unlink(disk / "filler")
        after = files(Path(out)) if Path(out).is_dir() else {}
        left = sorted(p.name for p in disk.iterdir() if p.name.startswith("."))
        done.append({"verb": verb, "room": room, "first": first, "code": code, "err": err,
                     "intact": after == before, "complete": sorted(after) == sorted(before),
                     "left": left})
print(json.dumps(done))
"""
"""Runs each verb with --out on the tmpfs `disk`, then again with the disk filled to leave
each of `rooms` bytes; prints what each run gave."""


def _namespace(tmp: Path) -> list[str] | None:
    """The command prefix of a mount namespace where a tmpfs can be mounted, or None."""
    if shutil.which("unshare") is None:
        return None
    probe = tmp / "probe"
    probe.mkdir()
    for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
        done = subprocess.run([*prefix, "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"],
                              capture_output=True)
        if done.returncode == 0:
            return prefix
    return None


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from stragglerlab.cli import main
    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.run.run_record import RunRecord

    root = tmp_path_factory.mktemp("inputs")
    base = make_base(root)
    for seed in (1, 2):
        clean = root / f"clean{seed}"
        assert main(["synth", "--quiet", "--out", str(clean), "--dp", "2", "--pp", "2",
                     "--steps", "3", "--microbatches", "2", "--seed", str(seed)]) == 0
        RunFolder(path=clean).write_record(RunRecord(outcome="ok"))
        assert main(["whatif", "--quiet", "--run", str(clean)]) == 0
    traces = ddp_job(root / "traces", slow={3: 2.0}, steps=(5, 6, 7))
    return base, root, traces


def _verbs(inputs, disk: Path) -> list[tuple[str, list[str], str]]:
    base, root, traces = inputs
    run = str(base.run)
    argvs = {
        "whatif": ["whatif", "--run", run],
        "detect": ["detect", "--run", run],
        "plot": ["plot", "--run", run],
        "score": ["score", "--runs", run, "--detector", "whatif", "--offline-only"],
        "figures": ["figures", "--runs", run, "--only", "fig03_waste_cdf"],
        "report": ["report", "--figures", str(base.figures)],
        "noise-floor": ["noise-floor", "--runs", str(root / "clean1"), str(root / "clean2")],
        "synth": ["synth", "--steps", "3"],
        "import": ["import", "kineto", "--traces", str(traces)],
    }
    return [(verb, [*argv, "--out", str(disk / verb)], str(disk / verb))
            for verb, argv in argvs.items()]


def test_every_writing_verb_on_a_full_disk_is_one_clear_error(inputs, tmp_path):
    prefix = _namespace(tmp_path)
    if prefix is None:
        pytest.skip("no mount namespace with a tmpfs can be made here (unshare -m or -rm)")
    disk = tmp_path / "disk"
    disk.mkdir()
    verbs = _verbs(inputs, disk)
    cmd = [*prefix, "sh", "-c", f"mount -t tmpfs -o size={DISK} tmpfs '{disk}' && "
           'exec "$0" "$@"', sys.executable, "-c", DRIVER, str(disk), json.dumps(ROOMS),
           json.dumps(verbs)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    assert {r["verb"] for r in results} == {v for v, _, _ in verbs}
    for r in results:
        what = f"{r['verb']} with {r['room']} bytes free"
        assert r["first"][0] == 0, f"{r['verb']} with room to spare: {r['first'][1]}"
        assert "Traceback" not in r["err"], f"{what}: {r['err']}"
        if r["code"] == 0:  # it fit: every output written anew (a report's time differs)
            assert r["complete"], f"{what}: wrote only part of its outputs"
        else:
            assert r["intact"], f"{what}: the outputs written before changed"
        assert not r["left"], f"{what}: left {r['left']} on the disk"
        if r["code"] != 0:
            assert r["code"] == 2, f"{what}: exit {r['code']}"
            err = r["err"]
            assert err.startswith(f"stragglerlab {r['verb']}: error: a write to "), err
            assert str(disk) in err and "No space left on device" in err, err
            assert " free there, less than the output needs" in err, err
            assert err.count("\n") == 1, err
        assert r["code"] == 2 or r["room"] > 0, f"{what}: wrote with no room at all"
    print(" ".join(f"{r['verb']}@{r['room']}:{r['code']}" for r in results))

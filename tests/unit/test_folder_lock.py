"""Two writers of one folder: a writing verb holds the folder's lock while it writes, and a
second writer is refused at once (exit 2) with one message naming the holder's verb and
pid. A lock left by a killed writer blocks nobody."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.util.folder_lock import LOCK_NAME, Holder, hold, lock_folder, release_at_end
from tests.unit.fuzz_corpus import make_base

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from stragglerlab.util.folder_lock import hold
with hold(sys.argv[1], sys.argv[2], **({"name": sys.argv[3]} if len(sys.argv) > 3 else {})):
    print("held", flush=True)
    time.sleep(600)
"""
"""Another process holding a folder's lock (as a writing verb does) until it is killed."""


class Writer:
    """A process holding `folder`'s lock as `verb`, stopped by its pid."""

    def __init__(self, folder: Path, verb: str, name: str | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), verb,
                                      *([name] if name else [])],
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert self.proc.stdout.readline().strip() == "held"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def writers():
    started: list[Writer] = []

    def start(folder: Path, verb: str, name: str | None = None) -> Writer:
        started.append(Writer(folder, verb, name))
        return started[-1]

    yield start
    for w in started:
        w.kill()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_base(tmp_path_factory.mktemp("base"))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_whatif_of_one_folder_is_refused_naming_the_first(base, tmp_path, capsys,
                                                                   writers):
    out = tmp_path / "out"
    assert main(["whatif", "--run", str(base.run), "--out", str(out), "--quiet"]) == 0
    before = _snapshot(out)
    first = writers(out, "whatif")
    capsys.readouterr()
    assert main(["whatif", "--run", str(base.run), "--out", str(out), "--quiet"]) == 2
    out_text, err = capsys.readouterr()
    assert err == (f"stragglerlab whatif: error: another whatif (`stragglerlab whatif`, pid "
                   f"{first.proc.pid}) is writing {out} now, and a second writer would mix "
                   "their files; wait for it to finish (or stop it), or pass another --out "
                   "folder\n")
    assert not out_text
    assert {k: v for k, v in _snapshot(out).items() if k != LOCK_NAME} == before


def _argvs(base, out: Path) -> dict[str, list[str]]:
    """Each writing verb writing `out` (or a file in it)."""
    run = str(base.run)
    return {
        "whatif": ["whatif", "--run", run, "--out", str(out)],
        "detect": ["detect", "--run", run, "--out", str(out)],
        "score": ["score", "--runs", run, "--detector", "whatif", "--offline-only",
                  "--out", str(out)],
        "plot": ["plot", "--run", run, "--out", str(out)],
        "figures": ["figures", "--runs", run, "--only", "fig03_waste_cdf", "--out", str(out)],
        "report": ["report", "--figures", str(base.figures), "--out", str(out)],
        "noise-floor": ["noise-floor", "--runs", run, "--out", str(out)],
        "import": ["import", "kineto", "--traces", str(out.parent / "none"), "--out",
                   str(out)],
        "synth": ["synth", "--out", str(out), "--steps", "3"],
    }


def test_every_writing_verb_is_refused_while_another_writes_its_folder(base, tmp_path,
                                                                       capsys, writers):
    out = tmp_path / "shared-out"
    holder = writers(out, "detect")
    for verb, argv in _argvs(base, out).items():
        if verb in FILE_WRITERS:
            continue
        assert main([*argv, "--quiet"]) == 2, verb
        err = capsys.readouterr().err
        assert err.startswith(f"stragglerlab {verb}: error: another detect (`stragglerlab "
                              f"detect`, pid {holder.proc.pid}) is writing {out} now"), err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]


FILE_WRITERS = ("detect", "score", "figures")
"""Verbs that write their own files into a folder others share (the workflow runs detectors and
named figures side by side into one folder): they do not lock the folder."""


def test_two_detectors_write_one_folder_side_by_side_one_file_once(base, tmp_path, capsys,
                                                                    writers):
    out = tmp_path / "detect"
    holder = writers(out, "detect", ".whatif.json.lock")  # a whatif detect writing
    argv = ["detect", "--run", str(base.run), "--out", str(out), "--quiet"]
    assert main([*argv, "--detector", "rank-score"]) == 0  # another file of the folder
    capsys.readouterr()
    assert main([*argv, "--detector", "whatif"]) == 2  # the same file
    assert f"pid {holder.proc.pid}" in capsys.readouterr().err


def test_a_lock_left_by_a_killed_writer_blocks_nobody(base, tmp_path, capsys, writers):
    out = tmp_path / "out"
    writers(out, "whatif").kill()  # SIGKILL: the kernel drops its flock, the file stays
    assert (out / LOCK_NAME).is_file()
    assert Holder.parse((out / LOCK_NAME).read_text()).verb == "whatif"
    assert main(["whatif", "--run", str(base.run), "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "whatif.json").read_text())["schema"].startswith(
        "stragglerlab.whatif/")
    assert not (out / LOCK_NAME).exists()  # the writer that ends removes it
    assert main(["whatif", "--run", str(base.run), "--out", str(out), "--quiet"]) == 0


def test_a_writer_leaves_no_lock_and_no_empty_folder(base, tmp_path, capsys):
    out = tmp_path / "new" / "out"
    assert main(["whatif", "--run", str(base.run), "--out", str(out), "--quiet"]) == 0
    assert LOCK_NAME not in {p.name for p in out.iterdir()}
    bad = tmp_path / "bad" / "out"  # refused after the lock was taken: nothing stays
    assert main(["whatif", "--trace", str(base.run / "meta.yaml"), "--out", str(bad),
                 "--quiet"]) == 2
    assert not (tmp_path / "bad").exists()


def test_a_writer_refused_in_its_own_process_too(tmp_path):
    """Locks are per open file: a second lock in one process is refused as well, and one
    taken in a release_at_end scope is released when the scope ends."""
    with release_at_end():
        lock_folder(tmp_path / "o", "whatif")
        with pytest.raises(Exception, match=f"another whatif .*pid {os.getpid()}"):
            with hold(tmp_path / "o", "plot"):
                pass
    with hold(tmp_path / "o", "plot") as path:
        assert Holder.parse(path.read_text()) == Holder(pid=os.getpid(), verb="plot")
    assert not (tmp_path / "o").exists()


def test_a_writer_refused_before_the_holder_wrote_its_record_names_the_holder(tmp_path):
    """The holder writes its record just after it takes the lock: a writer refused in
    between waits for the record instead of naming 'another ?'."""
    out = tmp_path / "o"
    out.mkdir()
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held, the record not yet written
    late = threading.Timer(0.1, os.pwrite, (fd, b'{"pid": 4242, "verb": "whatif"}\n', 0))
    late.start()
    try:
        with pytest.raises(Exception, match=r"another whatif \(`stragglerlab whatif`, pid 4242\)"):
            with hold(out, "plot"):
                pass
    finally:
        late.join()
        os.close(fd)


def test_a_new_folder_gets_every_output_in_one_rename_and_keeps_its_lock(tmp_path):
    from stragglerlab.util.atomic import staged_folder
    from stragglerlab.util.errors import InputError

    out = tmp_path / "o"
    with hold(out, "whatif"):
        made = out.stat().st_ino
        with staged_folder(out, owns=["a", "b"]) as tmp:
            (tmp / "a").write_text("1")
            (tmp / "b").write_text("2")
        assert out.stat().st_ino != made  # the staged folder took its place, whole
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME, "a", "b"]
        with pytest.raises(InputError, match="another whatif"):
            with hold(out, "plot"):
                pass
    assert sorted(p.name for p in out.iterdir()) == ["a", "b"]


def test_a_writer_arriving_during_the_rename_keeps_its_files(tmp_path, monkeypatch):
    """Between moving its lock file away and the rename, a folder is empty; a writer that
    takes it then keeps it, and the first writer fails without touching its files."""
    from stragglerlab.util import atomic
    from stragglerlab.util.atomic import staged_folder
    from stragglerlab.util.errors import InputError

    out = tmp_path / "o"
    rename = os.rename

    def then_another_writer(src, dst):
        rename(src, dst)
        (out / LOCK_NAME).write_text('{"pid": 1, "verb": "plot"}')

    with hold(out, "whatif"):
        monkeypatch.setattr(atomic.os, "rename", then_another_writer)
        with pytest.raises(InputError, match="another writer began writing"):
            with staged_folder(out, owns=["a"]) as tmp:
                (tmp / "a").write_text("1")
        monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
    assert Holder.parse((out / LOCK_NAME).read_text()) == Holder(pid=1, verb="plot")
    assert not list(tmp_path.glob(".o.*"))  # no staging folder left


@pytest.mark.parametrize("text", ["", "{", "[1]", '{"pid": "7", "verb": 3}', '{"pid": true}'])
def test_a_lock_file_of_another_shape_names_an_unknown_holder(text):
    assert Holder.parse(text) == Holder(pid=None, verb="?")


TRIES = 20
"""Pairs of concurrent whatif runs on one folder in the slow test."""


@pytest.mark.slow
def test_two_concurrent_whatifs_never_mix_their_files(base, tmp_path):
    """Two `whatif --run` processes started together on one folder, TRIES times: each
    exits 0 or is refused with the message (exit 2), and the folder always holds one
    complete what-if, equal to an uninterrupted run's."""
    ref = tmp_path / "ref"
    assert main(["whatif", "--run", str(base.run), "--out", str(ref), "--quiet"]) == 0
    expected = {k: v for k, v in _snapshot(ref).items()}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "stragglerlab", "whatif", "--run", str(base.run), "--out",
           str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    refused = 0
    for _ in range(TRIES):
        procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env=env) for _ in range(2)]
        done = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
        for code, err in done:
            assert code in (0, 2) and "Traceback" not in err, err
            if code == 2:
                refused += 1
                assert "error: another whatif (`stragglerlab whatif`, pid " in err, err
        assert any(code == 0 for code, _ in done)
        assert _snapshot(out) == expected
    print(f"{refused} of {2 * TRIES} whatif runs refused as second writers")


def test_a_folder_of_the_verbs_own_is_replaced_whole_and_another_is_merged(tmp_path):
    """Outputs replace a folder holding only the verb's files in one step; a folder also
    holding someone else's file or folder is merged into, and those are kept."""
    from stragglerlab.util.atomic import staged_folder

    def write(out: Path, text: str) -> None:
        with hold(out, "whatif"), staged_folder(out, owns=["a", "sub/*.json"]) as tmp:
            (tmp / "sub").mkdir()
            (tmp / "a").write_text(text)
            (tmp / "sub" / "b.json").write_text(text)

    own = tmp_path / "own"
    write(own, "1")
    inode = own.stat().st_ino
    write(own, "2")
    assert own.stat().st_ino != inode  # swapped whole
    assert (own / "a").read_text() == (own / "sub" / "b.json").read_text() == "2"
    for foreign in ("notes.txt", "empty-folder"):
        other = tmp_path / foreign.split(".")[0]
        write(other, "1")
        if "folder" in foreign:
            (other / foreign).mkdir()
        else:
            (other / foreign).write_text("x")
        inode = other.stat().st_ino
        write(other, "2")
        assert other.stat().st_ino == inode and (other / foreign).exists()  # merged
        assert (other / "a").read_text() == "2"


def test_the_working_folder_is_merged_into_not_swapped(tmp_path, monkeypatch):
    """`--out .`: a swap would leave the process (and a shell there) in the removed folder."""
    from stragglerlab.util.atomic import staged_folder

    out = tmp_path / "here"

    def write(text: str) -> None:
        with hold(out, "report"), staged_folder(out, owns=["a"]) as tmp:
            (tmp / "a").write_text(text)

    write("1")
    monkeypatch.chdir(out)
    inode = out.stat().st_ino
    write("2")
    assert out.stat().st_ino == inode and (out / "a").read_text() == "2"


@pytest.mark.parametrize("verb", ["synth", "import", "whatif", "report"])
def test_a_killed_writers_lock_file_is_no_other_runs_record(base, tmp_path, capsys, verb,
                                                            writers):
    """A folder holding only a lock file left by a killed writer counts as empty: the
    checks that refuse another job's folder pass it, and the verb writes there."""
    out = tmp_path / "out"
    writers(out, "import").kill()
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
    argv = [*_argvs(base, out)[verb], "--quiet"]
    if verb == "import":
        from tests.unit.general_fixtures import ddp_job

        argv[3] = str(ddp_job(tmp_path / "traces", slow={3: 2.0}, steps=(5, 6, 7)))
    assert main(argv) == 0, capsys.readouterr().err
    assert LOCK_NAME not in {p.name for p in out.iterdir()}

"""Every verb that reads run folders works on a read-only one (a shared dataset mounted
read-only) when its --out is elsewhere, and says clearly when its --out, given or the
default inside the run, cannot be written.

The folder is made read-only for the verb alone: as a user, by `chmod -R a-w`; as root
(where permissions do not bind), by a read-only bind mount inside a mount namespace of
the verb's own (`unshare -m`), so no mount outlives the test. Where neither is possible
the test is skipped, saying why."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.fuzz_corpus import make_base
from tests.unit.general_fixtures import ddp_job

ROOT = Path(__file__).resolve().parents[2]


def _can_mount_read_only(tmp: Path) -> str | None:
    """None when a read-only bind mount can be made in a private mount namespace, else
    why not."""
    if shutil.which("unshare") is None:
        return "no `unshare` on this machine"
    probe = tmp / "mount-probe"
    probe.mkdir()
    done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {probe} {probe} && "
                           f"mount -o remount,bind,ro {probe} && ! touch {probe}/x"],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else \
        f"no read-only bind mount here ({done.stderr.strip()[:120] or done.returncode})"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A shared folder of runs: a run with its what-if and findings, two clean runs, and a
    figures folder; read-only to the verbs run by `stragglerlab_ro`."""
    from stragglerlab.cli import main
    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.run.run_record import RunRecord

    root = tmp_path_factory.mktemp("dataset")
    if os.geteuid() == 0:
        why = _can_mount_read_only(tmp_path_factory.mktemp("probe"))
        if why:
            pytest.skip(f"running as root, where chmod does not bind, and {why}")
    shared = root / "shared"
    base = make_base(shared)
    for seed in (1, 2):
        clean = shared / f"clean{seed}"
        assert main(["synth", "--quiet", "--out", str(clean), "--dp", "2", "--pp", "2",
                     "--steps", "3", "--microbatches", "2", "--seed", str(seed)]) == 0
        RunFolder(path=clean).write_record(RunRecord(outcome="ok"))
        assert main(["whatif", "--quiet", "--run", str(clean)]) == 0
    assert main(["plot", "--quiet", "--run", str(base.run)]) == 0
    traces = ddp_job(root / "traces", slow={3: 2.0}, steps=(5, 6, 7))
    assert main(["import", "kineto", "--traces", str(traces), "--out", str(shared / "imported"),
                 "--quiet"]) == 0
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(shared)], check=True)
    yield shared
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "u+w", str(shared)], check=True)


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


DRIVER = """
import contextlib, io, json, sys, traceback
from stragglerlab.cli import main
done = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        except Exception:
            code, _ = 1, traceback.print_exc(file=err)
    done.append([code, err.getvalue()])
print(json.dumps(done))
"""
"""Runs each argv (a JSON list) with the CLI's main in one process, printing
[[exit code, stderr], ...]: one interpreter start for all of a test's verbs."""


def stragglerlab_ro(shared: Path, *argvs: list) -> list[tuple[int, str]]:
    """(exit code, stderr) of `stragglerlab ARGV --quiet` for each argv, with `shared`
    read-only to them."""
    import json

    todo = json.dumps([[*map(str, argv), "--quiet"] for argv in argvs])
    cmd = [sys.executable, "-c", DRIVER, todo]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if os.geteuid() == 0:
        cmd = ["unshare", "-m", "sh", "-c", f"mount --bind '{shared}' '{shared}' && "
               f"mount -o remount,bind,ro '{shared}' && exec \"$0\" \"$@\"", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return [(code, err) for code, err in json.loads(done.stdout.splitlines()[-1])]


def test_the_reading_verbs_work_on_a_read_only_run_with_out_elsewhere(dataset, tmp_path):
    run, figures = dataset / "run", dataset / "figures"
    before = _digest(dataset)
    out = tmp_path / "out"
    argvs = [
        ["whatif", "--run", run, "--out", out / "whatif"],
        ["whatif", "--trace", run / "trace.parquet", "--out", out / "whatif-trace"],
        ["whatif", "--run", dataset / "imported", "--out", out / "whatif-imported"],
        ["plot", "--run", dataset / "imported", "--out", out / "plot-imported"],
        ["detect", "--run", run, "--out", out / "detect"],
        ["plot", "--run", run, "--out", out / "plot"],
        ["score", "--runs", run, "--detector", "whatif", "--offline-only", "--out",
         out / "score"],
        ["figures", "--runs", run, "--only", "fig03_waste_cdf", "--out", out / "figures"],
        ["report", "--figures", figures, "--out", out / "report"],
        ["noise-floor", "--runs", dataset / "clean1", dataset / "clean2", "--out",
         out / "noise-floor"],
    ]
    for argv, (code, err) in zip(argvs, stragglerlab_ro(dataset, *argvs)):
        assert code == 0, f"{argv[0]}: {err}"
        assert any(Path(argv[-1]).iterdir()), argv[0]
    assert _digest(dataset) == before


DEFAULT_OUT = ["whatif", "detect", "plot"]
"""The verbs whose --out defaults to a folder inside --run."""


def test_a_default_out_inside_a_read_only_run_says_to_pass_out(dataset):
    run = dataset / "run"
    for verb, (code, err) in zip(DEFAULT_OUT, stragglerlab_ro(
            dataset, *([verb, "--run", run] for verb in DEFAULT_OUT))):
        assert code == 2 and "Traceback" not in err, err
        assert err.startswith(f"stragglerlab {verb}: error: --out {run}/{verb} "
                              f"(its default, inside --run {run}): "), err
        assert "is not writable (" in err and \
            "pass --out DIR to write the results elsewhere" in err
        assert err.count("\n") == 1
    imported = dataset / "imported"  # an import's what-if goes into the folder itself
    [(code, err)] = stragglerlab_ro(dataset, ["whatif", "--run", imported])
    assert code == 2 and err.startswith(f"stragglerlab whatif: error: --out {imported} (its "
                                        f"default, inside --run {imported}): "), err


def test_an_out_given_inside_a_read_only_folder_is_one_clear_error(dataset):
    run, figures = dataset / "run", dataset / "figures"
    argvs = [
        ["score", "--runs", run, "--detector", "whatif", "--offline-only", "--out", run / "s"],
        ["report", "--figures", figures, "--out", figures],
        ["figures", "--runs", run, "--only", "fig03_waste_cdf", "--out", run / "figs"],
    ]
    for argv, (code, err) in zip(argvs, stragglerlab_ro(dataset, *argvs)):
        assert code == 2 and "Traceback" not in err, err
        assert err.startswith(f"stragglerlab {argv[0]}: error: --out "), err
        assert "is not writable (" in err and "choose a folder you can write" in err

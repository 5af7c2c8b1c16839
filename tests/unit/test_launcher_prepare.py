"""A reused run folder starts clean: nothing of an earlier run leaks into the new one."""

from __future__ import annotations

from pathlib import Path

from stragglerlab.workloads.launcher import prepare_run_dir


def test_prepare_run_dir_removes_every_output_of_an_earlier_run(tmp_path: Path):
    run = tmp_path / "run"
    for rel in ("trace-parts/rank0.bin", "status/rank0.json", "gc/rank0.jsonl",
                "kineto/rank3.json.gz", "compute/rank0.jsonl", "cpu/rank0.jsonl",
                # made from the old trace: stale beside a new one
                "whatif/whatif.json", "detect/whatif.json", "monitor/windows.jsonl",
                "plot/timeline.png",
                "trace.parquet", "run.json", "faults.json", "meta.yaml"):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text("old")
    (run / "notes.txt").write_text("the user's own file")
    prepare_run_dir(run)
    left = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    assert left == ["notes.txt"]


def test_many_ranks_on_few_cores_get_a_longer_period_not_a_failure(monkeypatch):
    import stragglerlab.workloads.launcher as launcher
    from stragglerlab.scenarios.scenario import load_scenario

    made = {}

    class FakeIsolation:
        @staticmethod
        def available():
            return True, ""

        @staticmethod
        def create(run_id, n_ranks, cores, period_us):
            made.update(n=n_ranks, cores=cores, period=period_us)
            return FakeIsolation()

        def assign(self, rank, pid):
            pass

    monkeypatch.setattr(launcher, "CpuIsolation", FakeIsolation)
    monkeypatch.setattr(launcher.os, "cpu_count", lambda: 2)
    scenario = load_scenario("clean-dp2-pp4")  # 8 ranks on 2 cores: 0.225 cores each
    _iso, record = launcher._isolate(scenario, "run", list(range(8)), lambda msg: None)
    assert made["cores"] == record["cores_per_rank"] == 0.225
    assert made["period"] == record["period_us"] > scenario.run.cpu_period_us
    from stragglerlab.host.cgroups import MIN_QUOTA_US

    assert round(made["cores"] * made["period"]) >= MIN_QUOTA_US


def test_prepare_run_dir_keeps_the_history_of_a_monitor_started_beside_the_run(tmp_path):
    run = tmp_path / "run"
    for rel in ("monitor/monitor.lock", "monitor/windows.jsonl", "trace-parts/rank0.bin"):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text("x")
    prepare_run_dir(run, keep_monitor=True)  # launch, after `train --monitor` started it
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == [
        "monitor", "monitor/monitor.lock", "monitor/windows.jsonl"]


def test_train_refuses_an_out_folder_holding_another_jobs_trace(tmp_path, capsys):
    from stragglerlab.cli import main
    from tests.unit.cli_errors import one_error

    synth = tmp_path / "synth"
    assert main(["synth", "--out", str(synth), "--quiet"]) == 0
    capsys.readouterr()
    before = (synth / "trace.parquet").read_bytes()
    assert main(["train", "--scenario", "clean-dp2-pp2", "--out", str(synth), "--quiet"]) == 2
    assert "that `stragglerlab train` did not write" in one_error(capsys, "train")
    assert (synth / "trace.parquet").read_bytes() == before
    imported = tmp_path / "imported"
    imported.mkdir()
    (imported / "import.json").write_text("{}")
    assert main(["train", "--scenario", "clean-dp2-pp2", "--out", str(imported),
                 "--quiet"]) == 2
    assert "already holds another run's import.json" in one_error(capsys, "train")


def test_train_may_rerun_into_its_own_or_the_workflows_folder(tmp_path):
    from stragglerlab.cli.train import _not_another_job

    workflow = tmp_path / "wf"  # the workflow writes scenario.yaml before train runs
    workflow.mkdir()
    (workflow / "scenario.yaml").write_text("name: x\n")
    assert _not_another_job(workflow) == workflow
    killed = tmp_path / "killed"  # a killed train left its parts and a merged trace
    for rel in ("trace-parts/rank0.bin", "trace.parquet", "meta.yaml"):
        (killed / rel).parent.mkdir(parents=True, exist_ok=True)
        (killed / rel).write_text("old")
    assert _not_another_job(killed) == killed

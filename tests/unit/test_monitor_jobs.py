"""One monitor for many jobs (issue 61): the job registry, /metrics labelled job_name and
its bounds, the loop over several run folders (--runs, --watch), alerts naming the job,
the overview served beside each job's page, and the CLI's refusals."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.monitor import MonitorConfig
from stragglerlab.monitor.fleet import Fleet, find_runs
from stragglerlab.monitor.jobs import FleetLimits, JobRegistry, job_name
from stragglerlab.monitor.metrics import CAUSES, jobs_metrics_text
from stragglerlab.monitor.state import MonitorState
from tests.unit.monitor_helpers import make_feeder, synth


@pytest.fixture(scope="module")
def clean_src(tmp_path_factory) -> Path:
    """12 steps, no fault."""
    return synth(tmp_path_factory.mktemp("src") / "clean", "--steps", "12")


def _window(step: int, s: float, grid: list[list[float]], findings=()) -> dict:
    return {"kind": "window", "step": step, "steps": [step], "dp_size": len(grid[0]),
            "pp_size": len(grid), "slowdown": s, "valid": True, "worker_slowdown": grid,
            "stage_slowdown": {str(p): 1.0 for p in range(len(grid))},
            "optype_slowdown": {"forward-compute": s}, "findings": list(findings),
            "lag_s": 0.1, "lag_from_step_end_s": None}


SLOW = {"detector": "whatif", "cause": "slow-worker", "estimated_slowdown": 1.4,
        "ranks": [{"rank": 3, "dp_rank": 1, "stage": 1}], "first_step": 2, "last_step": 4}


def _state(name: str, window: dict | None) -> MonitorState:
    state = MonitorState(f"results/{name}/0")
    if window is not None:
        state.add(window)
    return state


# -- names and the registry ---------------------------------------------------------------

def test_job_names_are_label_and_url_safe_and_unique(tmp_path):
    assert job_name(Path("results/slow-worker-1/0")) == "slow-worker-1-0"
    assert job_name(tmp_path / "w" / "a b" / "3", base=tmp_path / "w") == "a-b-3"
    assert job_name(Path("x/ün!/0")) == "n-0"  # only [A-Za-z0-9_.-]
    assert len(job_name(Path("a" * 200) / "0")) <= 64
    reg = JobRegistry()
    first, _ = reg.add(Path("results/a/0"), _state("a", None))
    assert first.name == "a-0"
    assert reg.unique_name(Path("other/a/0")) == "a-0-2"  # another folder, same tail
    with pytest.raises(ValueError):
        reg.add(Path("x"), _state("x", None), name="a-0")


def test_the_registry_is_bounded_an_ended_job_makes_room():
    reg = JobRegistry(FleetLimits(max_jobs=2))
    a, _ = reg.add(Path("r/a"), _state("a", None))
    b, _ = reg.add(Path("r/b"), _state("b", None))
    assert not reg.has_room()
    assert reg.add(Path("r/c"), _state("c", None)) == (None, None) and reg.refused == 1
    b.state.finish(run_ended=True)
    a.state.finish(run_ended=True)  # both ended: the first added goes first
    c, evicted = reg.add(Path("r/c"), _state("c", None))
    assert c is not None and evicted is a
    assert [j.name for j in reg.all()] == ["r-b", "r-c"]
    with pytest.raises(Exception, match="--max-jobs 0"):
        JobRegistry(FleetLimits(max_jobs=0))


def test_the_overview_lists_jobs_by_current_s_with_findings():
    reg = JobRegistry()
    grid = [[1.0, 1.0], [1.0, 1.0]]
    reg.add(Path("r/clean"), _state("clean", _window(7, 1.01, grid)))
    reg.add(Path("r/new"), _state("new", None))
    reg.add(Path("r/slow"), _state("slow", _window(7, 1.4, grid, [SLOW])))
    rows = reg.overview()
    assert [r["name"] for r in rows] == ["r-slow", "r-clean", "r-new"]
    assert rows[0]["findings"] == [{"cause": "slow-worker", "ranks": [[1, 1]],
                                    "estimated_slowdown": 1.4}]
    assert rows[0]["last_step"] == 7 and rows[0]["status"] == "live"
    assert rows[2]["slowdown"] is None and rows[2]["findings"] == []


# -- /metrics of several jobs -----------------------------------------------------------

def _series(text: str) -> list[tuple[str, dict, str]]:
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        assert m, line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out.append((m.group(1), labels, m.group(3)))
    return out


def test_metrics_of_several_jobs_are_labelled_job_name_once_per_family():
    grid = [[1.0, 1.02], [1.01, 1.9]]
    text = jobs_metrics_text([("a-0", _window(5, 1.4, grid, [SLOW]), 6, 0),
                              ("b-0", _window(5, 1.0, grid), 6, 1),
                              ("c-0", None, 0, 0)], max_worker_series=1024)
    series = _series(text)
    names = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(names) == len(set(names))  # one HELP/TYPE per family: samples grouped
    for name, labels, _ in series:
        assert "job" not in labels and "instance" not in labels  # Prometheus's own labels
        if not name.startswith("stragglerlab_jobs"):
            assert list(labels)[0] == "job_name", (name, labels)
    found = {(lb["job_name"], lb["cause"]): v for n, lb, v in series
             if n == "stragglerlab_findings"}
    assert found[("a-0", "slow-worker")] == "1" and found[("b-0", "slow-worker")] == "0"
    assert ("c-0", "slow-worker") not in found  # no window yet: no window series
    errors = {lb["job_name"]: v for n, lb, v in series if n == "stragglerlab_monitor_errors_total"}
    assert errors == {"a-0": "0", "b-0": "1", "c-0": "0"}
    assert ("stragglerlab_jobs", {}, "3") in series
    # Per job with a window: 2 counters, S, valid, the workers, the stages, the op
    # types, 2 per cause, lag, last step and the dropped count: the documented bound.
    per_job = 2 + 2 + 4 + 2 + 1 + 2 * len(CAUSES) + 2 + 1
    assert sum(1 for _, lb, _v in series if lb.get("job_name") == "a-0") == per_job


def test_a_large_job_exports_its_highest_scored_workers_only():
    grid = [[1.0 + 0.001 * (p * 64 + d) for d in range(64)] for p in range(4)]
    grid[2][10] = 3.0
    text = jobs_metrics_text([("big", _window(1, 1.3, grid), 2, 0)], max_worker_series=8)
    workers = [(lb["dp_rank"], lb["stage"], float(v)) for n, lb, v in _series(text)
               if n == "stragglerlab_worker_slowdown"]
    assert len(workers) == 8 and ("10", "2", 3.0) in workers
    assert min(v for *_, v in workers) > 1.0 + 0.001 * (255 - 8)  # the top 8
    assert 'stragglerlab_worker_series_dropped{job_name="big"} 248' in text


# -- the loop over several runs -----------------------------------------------------------

def _fleet(tmp_path, runs=(), watch=None, **kw) -> Fleet:
    cfg = MonitorConfig(run=Path("."), window_steps=4, alert_backoff_s=0.01)
    return Fleet(cfg, runs=list(runs), watch=watch, limits=FleetLimits(**kw))


def test_one_loop_watches_three_runs_and_only_the_faulty_job_alerts(tmp_path, slow_src,
                                                                    clean_src):
    srcs = {"a": clean_src, "b": slow_src, "c": clean_src}
    feeders = {k: make_feeder(src, tmp_path / "results" / k / "0") for k, src in srcs.items()}
    for f in feeders.values():
        f.run_dir.mkdir(parents=True)
    fleet = _fleet(tmp_path, runs=[f.run_dir for f in feeders.values()])
    for step in range(12):
        for f in feeders.values():
            f.write_step(step)
        fleet.discover()
        fleet.poll()
    for f in feeders.values():
        (f.run_dir / "run.json").write_text("{}")
    fleet.run()  # every run ended: it stops by itself
    assert fleet.finished and set(fleet.done) == {"a-0", "b-0", "c-0"}
    rows = fleet.registry.overview()
    assert rows[0]["name"] == "b-0" and rows[0]["findings"][0]["ranks"] == [[1, 1]]
    assert all(not r["findings"] and r["windows_analysed"] == 12 for r in rows[1:])
    alerts = {name: [ln for ln in _lines(m.cfg.monitor_dir / "alerts.jsonl")]
              for name, m in fleet.done.items()}
    assert alerts["a-0"] == [] and alerts["c-0"] == []
    assert alerts["b-0"] and all(a["alert"]["job_name"] == "b-0" for a in alerts["b-0"])
    assert alerts["b-0"][0]["alert"]["event"] == "finding-appeared"
    assert 'stragglerlab_findings{job_name="b-0",cause="slow-worker"} 1' in \
        fleet.registry.metrics_text()


def _lines(path: Path) -> list[dict]:
    import json

    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_watch_picks_up_new_run_folders_and_a_lost_one_stops_only_itself(tmp_path, clean_src):
    results = tmp_path / "results"
    (results / "a" / "0" / "monitor").mkdir(parents=True)  # no trace yet: not a run
    fleet = _fleet(tmp_path, watch=results, max_jobs=2)
    fleet.discover()
    assert fleet.registry.all() == []
    one = make_feeder(clean_src, results / "a" / "0")
    one.write_step(0)
    two = make_feeder(clean_src, results / "b" / "7")
    two.write_step(0)
    assert find_runs(results) == [results / "a" / "0", results / "b" / "7"]
    fleet.discover()
    assert [j.name for j in fleet.registry.all()] == ["a-0", "b-7"]
    shutil.copytree(clean_src, results / "c" / "0")  # a finished run (trace.parquet)
    fleet.discover()  # two jobs are watched, none ended: it waits
    assert fleet.waiting == [results / "c" / "0"] and fleet.registry.refused == 1
    shutil.rmtree(results / "b")  # a run folder deleted mid-watch: that job stops
    fleet.poll()
    assert "b-7" in fleet.done and "a-0" in fleet.monitors
    fleet.discover()  # the stopped job's place goes to the waiting run
    assert [j.name for j in fleet.registry.all()] == ["a-0", "c-0"] and not fleet.waiting
    fleet.poll()
    assert fleet.registry.get("c-0").state.windows_analysed == 12
    fleet.close()


# -- the server ---------------------------------------------------------------------------

def test_the_overview_and_each_jobs_page_are_served_by_one_app(tmp_path, slow_src, clean_src):
    from starlette.testclient import TestClient

    from stragglerlab.monitor.server import make_jobs_app

    runs = []
    for name, src in (("clean", clean_src), ("slow", slow_src)):
        shutil.copytree(src, tmp_path / name / "0")
        runs.append(tmp_path / name / "0")
    fleet = _fleet(tmp_path, runs=runs)
    fleet.run(once=True)
    with TestClient(make_jobs_app(fleet.registry)) as client:
        page = client.get("/")
        assert page.status_code == 200 and "api/jobs" in page.text
        assert "http://" not in page.text and "https://" not in page.text  # no CDN
        jobs = client.get("/api/jobs").json()["jobs"]
        assert [j["name"] for j in jobs] == ["slow-0", "clean-0"]
        job = client.get("/jobs/slow-0/")
        assert job.status_code == 200 and '<canvas id="heat"' in job.text
        assert client.get("/jobs/slow-0", follow_redirects=False).headers["location"] == \
            "/jobs/slow-0/"
        lines = client.get("/jobs/clean-0/api/windows").json()["lines"]
        assert len(lines) == 12 and lines[-1]["step"] == 11
        assert client.get("/jobs/slow-0/api/truth").json()["faults"][0]["kind"] == \
            "slow-worker"
        # The job's watch stopped: its stream sends what there is, then `end`.
        body = client.get("/jobs/clean-0/events?after=9").text
        assert body.count("event: line") == 2 and "event: end" in body
        assert client.get("/jobs/nope/").status_code == 404
        assert client.get("/jobs/nope/api/windows").status_code == 404
        text = client.get("/metrics").text
        assert 'stragglerlab_job_slowdown{job_name="clean-0"}' in text
        assert 'stragglerlab_findings{job_name="slow-0",cause="slow-worker"} 1' in text
        assert 'stragglerlab_findings{job_name="slow-0"' in text
        one = client.get("/jobs/slow-0/metrics").text  # one job's, as a single monitor's
        assert "job_name" not in one and 'stragglerlab_findings{cause="slow-worker"} 1' in one


# -- the CLI ------------------------------------------------------------------------------

def test_the_cli_watches_several_runs_and_refuses_what_cannot_be(tmp_path, slow_src,
                                                                 clean_src, capsys):
    for name, src in (("clean", clean_src), ("slow", slow_src)):
        shutil.copytree(src, tmp_path / name / "0")
    a, b = str(tmp_path / "clean" / "0"), str(tmp_path / "slow" / "0")
    assert main(["monitor", "--runs", a, b, "--once", "--window-steps", "4", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("monitor of 2 job(s)")
    assert "slow-0" in out.splitlines()[1] and "slow-worker" in out.splitlines()[1]
    for argv, message in (
            ([], "name what to watch"),
            (["--run", a, "--runs", b], "--run watches one run"),
            (["--runs", a, "--dp", "2"], "--dp: one layout for every job"),
            (["--watch", str(tmp_path / "none")], "--watch: not a folder"),
            (["--runs", a, "--max-jobs", "0"], "--max-jobs 0"),
            (["--runs", str(tmp_path / "none")], "")):
        assert main(["monitor", *argv, "--once"]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err

"""Runs on a multi-node Ray cluster (slow tier): attach, spread, one clock, a lost node.

A 3-node cluster simulated on this machine (`ray.cluster_utils.Cluster`, each
node its own raylet and CPU resources); the jobs attach to it with
`stragglerlab train --ray-address`. A second test attaches to a cluster that
`ray start --head` started (own port, own temp dir; stopped by its own
process group in the teardown) and checks that the run leaves it running.

    nice .venv/bin/python -m pytest -m slow tests/e2e/test_ray_cluster.py
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from stragglerlab.analysis.whatif import analyze
from stragglerlab.host.cgroups import CpuIsolation
from stragglerlab.trace.trace_io import read_trace

pytestmark = pytest.mark.slow
ISOLATED = os.geteuid() == 0 and CpuIsolation.available()[0]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "stragglerlab", *args]


def our_cgroups(run: dict) -> list[str]:
    """This run's cgroup dirs still present (every node of the simulated cluster is here)."""
    base = Path("/sys/fs/cgroup/cpu/stragglerlab")
    run_id = (run.get("isolation") or {}).get("cgroup_run_id")
    if not run_id or not base.exists():
        return []
    return sorted(p.name for p in base.iterdir() if p.name.startswith(run_id))


def pid_gone(pid: int, wait_s: float = 15.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=1)
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    c.shutdown()


# Our own small jobs (the built-in scenarios' sizes change with the workload work).
SCENARIOS = """scenarios:
  cl-clean-dp2-pp2:
    parallel: {dp: 2, pp: 2}
    data: {tokens_per_microbatch: 512}
    run: {steps: 20}
  cl-slow-dp2-pp2:
    parallel: {dp: 2, pp: 2}
    run: {steps: 24}
    faults:
      - {kind: slow-worker, targets: [{dp_rank: 1, stage: 0}], params: {factor: 1.8}}
  cl-clean-dp4-pp1:
    parallel: {dp: 4, pp: 1}
    run: {steps: 14}
  cl-long-dp2-pp2:
    parallel: {dp: 2, pp: 2}
    run: {steps: 400, collective_timeout_s: 20}
"""


def train(cluster, scenario: str, out: Path, timeout: float = 400):
    config = out.parent / "scenarios.yaml"
    config.write_text(SCENARIOS)
    return subprocess.run(cli("train", "--scenario", scenario, "--config", str(config),
                              "--ray-address", cluster.address, "--placement", "spread",
                              "--out", str(out)),
                          capture_output=True, text=True, timeout=timeout)


def check_run(out: Path) -> tuple[dict, float]:
    """run.json and the what-if discrepancy; placement over >= 2 nodes; nothing left."""
    run = json.loads((out / "run.json").read_text())
    assert run["outcome"] == "ok", run["error"]
    nodes = {p["node_id"] for p in run["placement"]}
    assert len(nodes) >= 2, run["placement"]
    assert [p["rank"] for p in run["placement"]] == list(range(len(run["placement"])))
    assert all(p["device"] == "cpu" and p["node_ip"] for p in run["placement"])
    assert run["ray"]["attached"] and run["rendezvous"]["address"].startswith("tcp://")
    assert "127.0.0.1" not in run["rendezvous"]["address"]
    clock = run["clock"]
    assert set(clock["nodes"]) == nodes
    for node in clock["nodes"].values():  # one host: one kernel clock, nothing corrected
        assert node["same_clock"] and node["applied_s"] == 0.0
        assert abs(node["offset_s_start"]) <= node["uncertainty_s_start"] + 1e-3
    assert our_cgroups(run) == []
    assert all(h.get("cgroups_removed") == ISOLATED for h in run["hosts_undone"].values())
    df, meta = read_trace(out / "trace.parquet", out / "meta.yaml")
    assert df["rank"].nunique() == len(run["placement"])
    return run, analyze(df, meta, where=str(out)).simulation_discrepancy


@pytest.mark.parametrize("scenario,nodes", [("cl-clean-dp2-pp2", 2), ("cl-clean-dp4-pp1", 3)])
def test_spread_jobs_train_trace_and_pass_the_whatif(cluster, tmp_path: Path, scenario: str,
                                                     nodes: int):
    out = tmp_path / scenario
    t0 = time.monotonic()
    proc = train(cluster, scenario, out)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    run, discrepancy = check_run(out)
    placed = len({p["node_id"] for p in run["placement"]})
    print(f"{scenario} spread: wall {wall:.0f}s, discrepancy {discrepancy:.4f}, nodes {placed}")
    assert placed >= nodes  # 4 bundles spread over 3 nodes (2 + 1 + 1)
    assert discrepancy <= 1.05, discrepancy


def test_spread_dp2_pp2_slow_worker_on_the_second_node(cluster, tmp_path: Path):
    out = tmp_path / "sw"
    proc = train(cluster, "cl-slow-dp2-pp2", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run, discrepancy = check_run(out)
    # The slowed rank's throttled quota also delays its untraced CPU work: ~1.09 in a
    # private run of the same job; only a gross loss of clock agreement is flagged here.
    print(f"slow worker DP2xPP2 spread: discrepancy {discrepancy:.4f}")
    assert discrepancy <= 1.2, discrepancy
    victim = 1  # dp_rank 1, stage 0: the second pipeline, placed on another node
    node = {p["rank"]: p["node_id"] for p in run["placement"]}
    assert node[victim] != node[0] and node[2] == node[0]  # pipeline 0 stays on one node
    fault = json.loads((out / "faults.json").read_text())[0]
    requested, measured = fault["requested"]["factor"], fault["measured"]["factor"]
    print(f"slow worker on rank {victim}: requested {requested}, measured {measured:.3f}")
    # The injector acted on the other node: the victim is clearly slowed, and never more
    # than asked. Not the factor within 15 %: the victim's paced ops hold their nominal
    # time, but its peers' run past theirs when the host is loaded (a fresh-clone CI read
    # 1.37 for 1.8: the victim held 0.316 s of compute a step, its peer 0.19-0.30 s against
    # a nominal 0.18 s), which no pacer undoes on 2 cores. The factor's accuracy is the
    # local tests' (tests/e2e/test_local_launcher.py, the injector's unit tests).
    assert 1.2 < measured < requested * 1.15, fault
    whatif = subprocess.run(cli("whatif", "--run", str(out), "--quiet"), capture_output=True,
                            text=True, timeout=300)
    assert whatif.returncode == 0, whatif.stderr[-2000:]
    det = subprocess.run(cli("detect", "--run", str(out), "--detector", "whatif", "--out",
                             str(out / "detect"), "--quiet"), capture_output=True, text=True,
                         timeout=300)
    assert det.returncode == 0, det.stderr[-2000:]
    findings = json.loads((out / "detect" / "whatif.json").read_text())["findings"]
    blamed = {r["rank"] for f in findings for r in f["ranks"]}
    assert victim in blamed, findings


def _sigint_default() -> None:
    # A test run from a background job inherits SIGINT ignored (POSIX shells do that to
    # background jobs); the driver must see Ctrl-C as a terminal user's run would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_long_run(cluster, tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, list]:
    """A long DP 2 x PP 2 run on the cluster, once every rank passed step 2: (driver, run
    folder, rank pids)."""
    config = tmp_path / "scenarios.yaml"
    config.write_text(SCENARIOS)
    out = tmp_path / name
    proc = subprocess.Popen(cli("train", "--scenario", "cl-long-dp2-pp2", "--config", str(config),
                                "--ray-address", cluster.address, "--placement", "spread",
                                "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline:
        try:
            # step 3 done: the first traced step, after the three warm-up steps (0-2)
            if min(json.loads((out / "status" / f"rank{r}.json").read_text())["step"]
                   for r in range(4)) >= 3:
                break
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            pytest.fail(proc.communicate()[1][-3000:])
        time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("the run never reached step 3")
    pids = [json.loads((out / "status" / f"rank{r}.json").read_text())["pid"] for r in range(4)]
    return proc, out, pids


def test_ctrl_c_undoes_every_node(cluster, tmp_path: Path):
    proc, out, pids = start_long_run(cluster, tmp_path, "interrupted")
    try:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["outcome"] == "failed" and run["error"]["kind"] == "interrupted"
    assert set(run["hosts_undone"]) == {p["node_id"] for p in run["placement"]}
    assert all(h.get("cgroups_removed") == ISOLATED for h in run["hosts_undone"].values())
    assert our_cgroups(run) == []
    assert all(pid_gone(pid) for pid in pids), "a rank process outlived the run"
    read_trace(out / "trace.parquet", out / "meta.yaml")  # the steps before, readable


def test_lost_node_fails_the_run_cleanly(cluster, tmp_path: Path):
    """Last in this module: it removes a node from the shared cluster."""
    victim_node = cluster.list_all_nodes()[1]  # a worker node (the head holds the GCS)
    proc, out, pids = start_long_run(cluster, tmp_path, "lost")
    try:
        cluster.remove_node(victim_node, allow_graceful=False)
        killed_at = time.monotonic()
        _, stderr = proc.communicate(timeout=180)
        ended_after = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"lost node: run ended {ended_after:.1f}s after the raylet was killed")
    assert proc.returncode == 1, stderr[-3000:]
    assert ended_after < 20 + 30, ended_after
    run = json.loads((out / "run.json").read_text())
    assert run["outcome"] == "failed" and run["error"]["kind"] == "node-lost", run["error"]
    on_node = sorted(p["rank"] for p in run["placement"]
                     if p["node_id"] == victim_node.node_id)
    assert on_node, run["placement"]
    assert run["lost_nodes"] == [{"node_id": victim_node.node_id, "ranks": on_node}]
    assert run["error"]["lost_ranks"] == on_node and run["error"]["rank"] in on_node
    df, _ = read_trace(out / "trace.parquet", out / "meta.yaml")  # partial, readable
    assert df["step"].nunique() >= 1 and df.groupby("step")["rank"].nunique().min() == 4
    survivors = {p["node_id"] for p in run["placement"]} - {victim_node.node_id}
    assert set(run["hosts_undone"]) == survivors
    assert all(pid_gone(pid) for pid in pids), "a rank process outlived the run"
    assert our_cgroups(run) == []  # the lost node's too (a survivor reaped them)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def head():
    """A cluster from `ray start --head --block` in its own process group and temp dir."""
    ray_bin = Path(sys.executable).with_name("ray")
    temp = tempfile.mkdtemp(prefix="slray", dir="/tmp")  # short: Ray's socket paths
    port = _free_port()
    log = Path(temp + ".log")
    with log.open("w") as sink:
        proc = subprocess.Popen([str(ray_bin), "start", "--head", "--block", f"--port={port}",
                                 "--num-cpus=4", "--include-dashboard=false",
                                 f"--temp-dir={temp}", "--disable-usage-stats"],
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and address is None and proc.poll() is None:
            # `ray start` prints how to join: ray start --address='IP:PORT'
            m = re.search(r"--address='([^']+)'", log.read_text())
            if m:
                address = m.group(1)
            time.sleep(0.5)
        assert address, f"ray start --head did not come up: {log.read_text()[-2000:]}"
        yield address, proc
    finally:
        # Our own processes only, never `ray stop`: the process group of `ray start`
        # (SIGTERM makes it stop its node), then any process naming our temp dir.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in procs_naming(temp):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)
        log.unlink(missing_ok=True)


# `ray start` turns token authentication on when ~/.ray/auth_token exists: then a client
# must send the token (RAY_AUTH_MODE=token), as Ray documents.
AUTH = {"RAY_AUTH_MODE": "token"} if (Path.home() / ".ray" / "auth_token").exists() else {}


def procs_naming(text: str) -> list[int]:
    """Live processes whose command line names `text` (our head's temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def status(ip: str, port: int) -> subprocess.CompletedProcess:
    ray_bin = Path(sys.executable).with_name("ray")
    return subprocess.run([str(ray_bin), "status", f"--address={ip}:{port}"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **AUTH))


def test_attached_run_leaves_a_ray_start_cluster_running(head, tmp_path: Path):
    address, proc = head
    out = tmp_path / "attached"
    run_proc = subprocess.run(cli("train", "--scenario", "clean-dp2-pp2", "--steps", "4",
                                  "--out", str(out)), capture_output=True, text=True,
                              timeout=300,
                              env=dict(os.environ, RAY_ADDRESS=address, **AUTH))
    assert run_proc.returncode == 0, run_proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["ray"]["address"] == address and run["outcome"] == "ok"
    assert len({p["node_id"] for p in run["placement"]}) == 1
    assert proc.poll() is None, "the cluster's `ray start` exited"
    ip, port = address.rsplit(":", 1)
    deadline = time.monotonic() + 60
    while True:  # Ray frees a removed placement group's resources asynchronously
        st = status(ip, int(port))
        assert st.returncode == 0, st.stderr[-2000:]
        if "0.0/4.0 CPU" in st.stdout or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert "Active:" in st.stdout and "Recent failures:\n (no failures)" in st.stdout, st.stdout
    assert "0.0/4.0 CPU" in st.stdout, st.stdout  # our actors and bundles are gone

"""The live monitor across a Ray cluster's nodes (slow tier).

A 3-node cluster simulated on this machine (`ray.cluster_utils.Cluster`, each
node its own raylet): a head with no CPU for ranks, and two nodes that each keep
their run folders elsewhere (STRAGGLERLAB_NODE_ROOT in its raylet's environment),
so every rank's trace parts reach the driver's run folder only through the part
stream (its node's helper, Ray's object store, workloads/cluster_stream.py).
`train --ray-address --monitor` runs a DP 2 x PP 2 job, a pipeline on each node
(which one where is Ray's choice), with a slow worker (DP 1, stage 1) over steps
FIRST-LAST. The test checks, while the run goes on:

* the monitor names the victim within 3 complete steps of the fault's first step
  (history, and /metrics scraped live), and the finding clears after the fault;
* a window equals the same steps analysed offline from the finished trace.parquet,
  finding for finding;
* killing the raylet of the victim's node shows it lost, with its ranks, on the page's
  data and in /metrics; the monitor does not crash and stops by itself when the
  run (which fails on a lost node) ends.

    .venv/bin/python -m pytest -m slow tests/e2e/test_monitor_cluster.py -s
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from stragglerlab.monitor.history import read_lines

pytestmark = pytest.mark.slow

FIRST, LAST, STEPS, WINDOW = 7, 12, 200, 6
"""The fault's steps, the run's length (it is cut short by the lost node) and --window-steps."""
KILL_AFTER = LAST + WINDOW + 3
"""The second node's raylet is killed once the monitor analysed this step (the finding has
cleared by then: it leaves the window at LAST + WINDOW and clears two windows later)."""
CONFIG = f"""
scenarios:
  cluster-monitor-slow:
    parallel: {{dp: 2, pp: 2}}
    run: {{steps: {STEPS}, pace_compute: true, collective_timeout_s: 20}}
    faults:
      - {{kind: slow-worker, targets: [{{dp_rank: 1, stage: 1}}], first_step: {FIRST},
          last_step: {LAST}, params: {{factor: 2.0}}}}
"""


def text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as r:
        return r.read().decode()


def victim_named(w: dict) -> bool:
    return any(f["cause"] == "slow-worker" and [(r["dp_rank"], r["stage"]) for r in f["ranks"]]
               == [(1, 1)] for f in w["findings"])


@pytest.fixture
def cluster(tmp_path: Path):
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = {name: c.add_node(num_cpus=2, env_vars={
        "STRAGGLERLAB_NODE_ROOT": str(tmp_path / name)}) for name in ("node-b", "node-c")}
    c.wait_for_nodes()
    yield c, nodes
    c.shutdown()


def test_the_monitor_sees_every_node_live_and_a_lost_one(cluster, tmp_path: Path):
    c, nodes = cluster
    config = tmp_path / "scenarios.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stragglerlab", "train", "--scenario", "cluster-monitor-slow",
         "--config", str(config), "--ray-address", c.address, "--placement", "spread",
         "--out", str(out), "--monitor", "--monitor-args", f"--window-steps {WINDOW} --port 0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    url: list[str] = []

    def drain() -> None:
        for line in proc.stderr:
            err.append(line)
            if "monitor page: http://127.0.0.1:" in line and not url:
                url.append(line.split("monitor page: ")[1].split()[0])

    threading.Thread(target=drain, daemon=True).start()
    # A second monitor attaches to the running job through the cluster, into a folder of
    # its own (as on a host that shares no filesystem with the driver).
    attached_dir = tmp_path / "attached"
    attached = subprocess.Popen(
        [sys.executable, "-m", "stragglerlab", "monitor", "--ray-address", c.address,
         "--run", str(attached_dir), "--ray-run", str(out.resolve()), "--no-serve",
         "--window-steps", str(WINDOW), "--warmup-steps", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scraped: list[dict] = []
    killed_at = None
    lost_seen: dict = {}
    try:
        deadline = time.monotonic() + 480
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
            if not url:
                continue
            try:
                metrics = text(url[0] + "metrics")
                summary = json.loads(text(url[0] + "api/windows?after=999999999"))["summary"]
            except OSError:
                continue
            step = re.search(r"^stragglerlab_last_step (\S+)$", metrics, re.M)
            found = re.search(r'^stragglerlab_findings\{cause="slow-worker"\} (\S+)$',
                              metrics, re.M)
            if step and found:
                scraped.append({"step": int(float(step[1])), "slow_worker": float(found[1])})
            if killed_at is None and step and int(float(step[1])) >= KILL_AFTER:
                ranks = {nid: n["ranks"] for nid, n in
                         json.loads((out / "nodes.json").read_text())["nodes"].items()}
                name, node_b = next((k, n) for k, n in nodes.items() if 3 in ranks[n.node_id])
                c.remove_node(node_b, allow_graceful=False)
                killed_at = time.monotonic()
            if killed_at is not None and summary.get("lost_ranks") and not lost_seen:
                lost_seen = {"after_s": time.monotonic() - killed_at, "summary": summary,
                             "metrics": metrics}
        proc.wait(timeout=240)
        att_out, att_err = attached.communicate(timeout=240)
    finally:
        for p in (proc, attached):
            if p.poll() is None:
                p.kill()
                p.wait()
    log = "".join(err)
    assert url, log[-4000:]
    assert killed_at is not None, f"the monitor never reached step {KILL_AFTER}: {log[-4000:]}"
    run = json.loads((out / "run.json").read_text())
    placement = {p["rank"]: p["node_id"] for p in run["placement"]}
    assert placement[1] == placement[3] == node_b.node_id != placement[0], run["placement"]
    # Each node's ranks wrote their parts in its own folder; they reached ours through the
    # stream while the run went on.
    assert (tmp_path / name / str(out).lstrip("/") / "trace-parts" / "rank3.bin").exists()
    assert run["stream"]["nodes_streamed"] == sorted(n.node_id for n in nodes.values())
    assert run["stream"]["bytes"] > 0, run["stream"]
    # Refused batches can only come from the dying node (a rank killed mid-step leaves an
    # async op's end unset): until the kill, every step of every rank came through.
    print(f"stream: {run['stream']}")
    assert all(e.startswith(f"node {node_b.node_id}: ") for e in run["stream"]["errors"])
    assert run["outcome"] == "failed" and run["error"]["kind"] == "node-lost", run["error"]

    windows = [w for w in read_lines(out / "monitor" / "windows.jsonl") if w["kind"] == "window"]
    assert [w["step"] for w in windows][:KILL_AFTER - 2] == list(range(3, KILL_AFTER + 1))
    named = [w["step"] for w in windows if victim_named(w)]
    print(f"victim named at steps {named}; lost node shown {lost_seen.get('after_s')} s after "
          f"the kill")
    assert named and FIRST <= named[0] <= FIRST + 2, named
    after = [m for m in scraped if m["step"] >= named[0]]
    assert after and after[0]["slow_worker"] >= 1, scraped[-5:]
    cleared = [w["step"] for w in windows if w["step"] > named[0] and not victim_named(w)]
    assert cleared and cleared[0] <= LAST + WINDOW + 2, [(w["step"], victim_named(w))
                                                        for w in windows]
    # The lost node: page data and /metrics, within a few looks of Ray calling it dead.
    assert lost_seen, log[-4000:]
    assert lost_seen["summary"]["lost_ranks"] == [1, 3]
    assert f'stragglerlab_node_lost{{node="{node_b.node_id}"}} 1' in lost_seen["metrics"]
    assert "stragglerlab_ranks_lost 2" in lost_seen["metrics"]
    errors = [x["message"] for x in read_lines(out / "monitor" / "windows.jsonl")
              if x["kind"] == "error"]
    assert any(f"node {node_b.node_id} lost with ranks [1, 3]" in e for e in errors), errors
    # The monitor did not crash: it stopped by itself when the run ended.
    assert "the run ended" in (out / "monitor" / "monitor.log").read_text()
    assert "Traceback" not in log

    # One window of the fault, analysed offline from the finished trace: the same findings.
    from stragglerlab.monitor.window import analyse_window, make_detectors
    from stragglerlab.trace.trace_io import read_trace

    df, meta = read_trace(out / "trace.parquet", out / "meta.yaml")
    w = next(x for x in windows if x["step"] == named[0] + 1)
    part = df[df["step"].isin(w["steps"])].copy()
    part["start_ts"] -= part["start_ts"].min()
    offline = analyse_window(part.reset_index(drop=True), meta,
                             make_detectors(["whatif"]), str(out), testbed=True,
                             window_steps=WINDOW)

    def keys(line: dict) -> list:
        return sorted((f["cause"], [(r["dp_rank"], r["stage"]) for r in f["ranks"]],
                       f["first_step"], f["last_step"]) for f in line["findings"])

    assert keys(offline) == keys(w), (keys(offline), keys(w))

    # The monitor that attached later through the cluster saw the same job: every node's
    # ranks streamed into its own folder, the same windows, the victim named, the node lost.
    assert attached.returncode == 0, att_err[-3000:]
    assert "the run's helpers are gone" in att_err, att_err[-3000:]
    att = [x for x in read_lines(attached_dir / "monitor" / "windows.jsonl")
           if x["kind"] == "window"]
    assert [x["step"] for x in att][:KILL_AFTER - 2] == list(range(3, KILL_AFTER + 1))
    att_named = [x["step"] for x in att if victim_named(x)]
    print(f"attached monitor: victim named at {att_named}")
    assert att_named and FIRST <= att_named[0] <= FIRST + 2, att_named
    att_nodes = json.loads((attached_dir / "nodes.json").read_text())["nodes"]
    assert att_nodes[node_b.node_id]["lost"] and not att_nodes[placement[0]]["lost"]

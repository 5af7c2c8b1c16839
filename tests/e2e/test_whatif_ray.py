"""`stragglerlab whatif --ray-address` on a simulated 3-node Ray cluster (slow tier).

Three node processes on this host (`ray.cluster_utils.Cluster`, one CPU each,
as tests/e2e/test_ray_cluster.py builds them); the verb attaches with the head's
address and splits the replays over one actor per node. Every output file is
byte for byte the one-process run's: the artifact's reference trace, a testbed
trace with launch attribution and a synthetic DP 16 x PP 4 job with a slow worker.

    nice .venv/bin/python -m pytest -m slow tests/e2e/test_whatif_ray.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.refdata import DIFFERENTIAL, reference

pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stragglerlab", *args], capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def same_as_one_process(source: list[str], out: Path, address: str) -> str:
    """Run the verb in one process and on the cluster; assert equal outputs; the Ray
    run's stderr."""
    one = cli("whatif", *source, "--out", str(out / "one"), "--quiet")
    assert one.returncode == 0, one.stderr
    on_ray = cli("whatif", *source, "--out", str(out / "ray"), "--ray-address", address,
                 "--ray-workers", "3")
    assert on_ray.returncode == 0, on_ray.stderr
    ours, theirs = files(out / "one"), files(out / "ray")
    assert "whatif.json" in ours and ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name] == theirs[name], f"{name} differs from the one-process run"
    assert one.stdout.replace("/one/", "/ray/") == on_ray.stdout  # the printed summary too
    return on_ray.stderr


def test_reference_trace_on_three_nodes_is_bit_for_bit(cluster, tmp_path):
    err = same_as_one_process(["--trace", str(reference("trace-AR.parquet")), "--meta",
                               str(reference("meta-AR.yaml"))], tmp_path, cluster.address)
    assert re.search(r"replays on 3 Ray workers \(3 nodes, 3 CPUs\), 44 steps split 14/15/15",
                     err), err
    workers = re.search(r"ray workers: (.*)", err).group(1).split("; ")
    assert len({re.search(r"pid (\d+)", w).group(1) for w in workers}) == 3


def test_launch_attribution_on_three_nodes_is_bit_for_bit(cluster, tmp_path):
    """A testbed trace (simulation discrepancy >= 1.03): its launch-delay replays are split
    too, each actor holding its steps' delays."""
    err = same_as_one_process(["--trace", str(DIFFERENTIAL / "gc-pauses" / "trace.parquet")],
                              tmp_path, cluster.address)
    assert "3 Ray workers" in err, err
    assert json.loads((tmp_path / "ray" / "whatif.json").read_text())[
        "launch_slowdown_by_optype"]


def test_synthetic_job_on_three_nodes_is_bit_for_bit(cluster, tmp_path):
    run = tmp_path / "synth"
    made = cli("synth", "--out", str(run), "--dp", "16", "--pp", "4", "--steps", "7",
               "--slow", "3,2,1.6,2", "--quiet")
    assert made.returncode == 0, made.stderr
    err = same_as_one_process(["--run", str(run)], tmp_path, cluster.address)
    assert "7 steps split 2/2/3" in err, err


def test_more_workers_than_free_cpus_is_one_clear_error(cluster, tmp_path):
    res = cli("whatif", "--trace", str(reference("trace-ST.parquet")), "--meta",
              str(reference("meta-ST.yaml")), "--out", str(tmp_path / "out"), "--quiet",
              "--ray-address", cluster.address, "--ray-workers", "4")
    assert res.returncode == 2, res.stderr
    assert "one free CPU per worker is needed" in res.stderr and "3 free" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "out" / "whatif.json").exists()

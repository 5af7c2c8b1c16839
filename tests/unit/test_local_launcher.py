"""The local launcher's pure decisions and the host staging of gloo ranks on a GPU."""

from __future__ import annotations

import datetime

import pytest

from stragglerlab.injectors.slow_worker import _on_gpu
from stragglerlab.scenarios.faults import parse_faults
from stragglerlab.scenarios.scenario_vocab import Backend, Workload
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.local_launcher import check_shared_gpu, local_devices


@pytest.mark.parametrize("world,gpus,backend,devices,chosen", [
    (4, 0, Backend.AUTO, [None] * 4, Backend.GLOO),  # CPU machine: the engine's own rule
    (4, 8, Backend.GLOO, [None] * 4, Backend.GLOO),  # gloo asked for: CPU ranks
    (2, 2, Backend.AUTO, ["cuda:0", "cuda:1"], Backend.NCCL),  # a GPU each
    (1, 1, Backend.NCCL, ["cuda:0"], Backend.NCCL),
    (4, 1, Backend.AUTO, ["cuda:0"] * 4, Backend.GLOO),  # one GPU shared, through the host
    (5, 2, Backend.AUTO, ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"], Backend.GLOO),
])
def test_devices_follow_the_gpus_there_are(world, gpus, backend, devices, chosen):
    assert local_devices(world, gpus, backend) == (devices, chosen)


@pytest.mark.parametrize("world,gpus", [(4, 0), (4, 2)])
def test_nccl_without_a_gpu_per_rank_is_refused(world, gpus):
    with pytest.raises(InputError, match="nccl needs a GPU per rank"):
        local_devices(world, gpus, Backend.NCCL)


@pytest.mark.parametrize("workload", [Workload.DDP, Workload.FSDP, Workload.PIPELINING])
def test_torch_wrappers_sharing_a_gpu_are_refused_but_run_on_the_cpu(workload):
    with pytest.raises(InputError, match="backend: gloo"):
        check_shared_gpu(workload, *local_devices(2, 1, Backend.AUTO))
    # gloo asked for on a GPU machine: CPU ranks, as on a machine without one (not
    # refused as "sharing 1 GPU")
    check_shared_gpu(workload, *local_devices(2, 1, Backend.GLOO))
    check_shared_gpu(Workload.MEGATRON, *local_devices(4, 1, Backend.AUTO))


def test_staged_collectives_copy_through_the_host_and_back(tmp_path):
    """A real gloo group of one rank; `host` returns a copy, as it does for a GPU tensor,
    so the result must come back into the caller's tensor."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from stragglerlab.workloads.host_staging import HostStaged

    copies = []

    class CopyStaged(HostStaged):
        def host(self, t):
            copies.append(t.shape)
            return t.clone()

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        comm = CopyStaged(staged=True)
        t = torch.tensor([1.0, 2.0])
        comm.all_reduce(t)
        out = torch.zeros(2)
        comm.all_gather_single(out, torch.tensor([3.0, 4.0]))
        assert out.tolist() == [3.0, 4.0]  # copied back from the host buffer
        shard = torch.zeros(2)
        comm.reduce_scatter_single(shard, torch.tensor([5.0, 6.0]))
        assert shard.tolist() == [5.0, 6.0]
        assert t.tolist() == [1.0, 2.0] and len(copies) == 5
        plain = HostStaged(staged=False)
        x = torch.ones(3)
        assert plain.host(x) is x
    finally:
        dist.destroy_process_group()


def test_slow_worker_on_a_shared_gpu_is_measured_as_gpu_sleep():
    """Ranks sharing a GPU use gloo: the victim's device in `placement` says it slept."""
    faults = [{"kind": "slow-worker", "targets": [{"dp_rank": 1, "stage": 1}],
               "first_step": 3, "params": {"factor": 2.0}}]
    spec = parse_faults(faults, 2, 2, 8, "test")[0]
    run = {"backend": "gloo", "scenario": {"parallel": {"dp": 2}},
           "placement": [{"rank": r, "device": "cuda:0"} for r in range(4)]}
    assert _on_gpu(run, spec)
    run["placement"][3]["device"] = "cpu"
    assert not _on_gpu(run, spec)
    assert not _on_gpu({"backend": "gloo"}, spec)


@pytest.mark.parametrize("launcher,absent,says", [
    ("ray", {"ray"}, "not installed: ray. Install the extra: pip install 'stragglerlab[train]' "
                     "(where torch is installed without Ray"),
    ("ray", {"torch", "ray"}, "not installed: torch, ray"),
    ("local", {"torch"}, "train needs torch; not installed: torch"),
])
def test_train_without_its_extra_is_one_clear_error(monkeypatch, launcher, absent, says):
    """A core install has neither torch nor Ray: `train` says what to install."""
    import importlib.util

    from stragglerlab.cli.train import check_train_extra

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in absent else real(name, *a))
    with pytest.raises(InputError, match=f"^--launcher {launcher}: train needs") as e:
        check_train_extra(launcher)
    assert says in str(e.value)


def test_local_launcher_needs_no_ray(monkeypatch):
    import importlib.util

    from stragglerlab.cli.train import check_train_extra

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    check_train_extra("local")  # torch is here: nothing to say

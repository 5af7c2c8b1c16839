"""Which trainer runs a rank: the scenario's `workload` picks our engine or one of torch's
wrappers (stragglerlab.scenarios.scenario_vocab.Workload).

Called in the rank's own process (a Ray actor, workloads/rank_actors.py, or a local
process, workloads/local_launcher.py), never by the driver, which imports no torch. Each
workload's module is imported only when that workload runs: FSDP or pipelining pull in
torch.distributed subpackages the others never need. No trainer imports this module, so
those imports hide no cycle (tests/unit/test_import_cycles.py).

    trainer = trainer_class(scenario.workload)(scenario, rank, run_dir, init_method)
    summary = trainer.run(cgroup, net)
"""

from __future__ import annotations

from stragglerlab.scenarios.scenario_vocab import Workload
from stragglerlab.workloads.rank_base import RankTrainerBase


def trainer_class(workload: Workload) -> type[RankTrainerBase]:
    """The rank trainer class of a workload."""
    if workload is Workload.DDP:
        from stragglerlab.workloads.torch_ddp import DdpTrainer

        return DdpTrainer
    if workload is Workload.FSDP:
        from stragglerlab.workloads.torch_fsdp import FsdpTrainer

        return FsdpTrainer
    if workload is Workload.PIPELINING:
        from stragglerlab.workloads.torch_pipelining import PipeliningTrainer

        return PipeliningTrainer
    from stragglerlab.workloads.engine import RankTrainer

    return RankTrainer

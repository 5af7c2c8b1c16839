"""One rank of a job built on torch's own wrappers, traced by torch.profiler alone.

The shared loop of the DDP, FSDP and pipelining workloads (workloads/torch_ddp.py,
torch_fsdp.py, torch_pipelining.py): join the process group, build the wrapped
model (the subclass), then per step: fault hooks, one training step, the
profiler's step mark. None of our op tracer or record_function ranges: the
rank's Kineto trace (`<run>/kineto/rank<r>.json.gz`, workloads/profiling.py)
is all a run records of its ops, as for a user's own job. Beside it, for the
launcher and the ground truth:

* `status/rank<r>.json`: progress, as our engine writes it (the launcher's hang
  detection and progress line);
* `compute/rank<r>.jsonl`: per step, the wall time of the model's Linear layers
  (workloads/torch_model.ComputeClock) and of the step, from which faults.json
  measures a slow worker's factor (stragglerlab/run/compute_log.py).

With `run.pace_compute`, each Linear's forward and backward runs at a fixed
device rate measured in the warm-up steps (workloads/torch_pacing.py), as a GPU would;
what pacing did is kept in `pacing/rank<r>.json`.

Faults act through the same hooks as in our engine (workloads/fault_hooks.py):
at each step start (the slow worker's CPU-quota cut) and around the step's
forward and backward (its in-process fallbacks). The wrappers issue their own
collectives, so faults that hook our communication ops are refused by the
scenario check (stragglerlab.scenarios.scenario_vocab.TORCH_WORKLOAD_FAULTS).

    trainer = DdpTrainer(scenario, rank, run_dir, init_method)   # workloads.trainers picks it
    summary = trainer.run(cgroup, None)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from stragglerlab.injectors.base import RankContext
from stragglerlab.run.compute_log import ComputeLog
from stragglerlab.scenarios.faults import FaultSpec
from stragglerlab.scenarios.scenario import Scenario
from stragglerlab.util.atomic import atomic_write_text
from stragglerlab.workloads.fault_hooks import FaultHooks
from stragglerlab.workloads.pacing import pace_share, settles_after
from stragglerlab.workloads.profiling import KinetoProfiler
from stragglerlab.workloads.rank_base import RankTrainerBase
from stragglerlab.workloads.torch_model import ComputeClock, batch, loss_fn
from stragglerlab.workloads.torch_pacing import LinearPacer
from stragglerlab.workloads.tracer import now


class TorchRankTrainer(RankTrainerBase):
    """The training loop; subclasses build the wrapped model and run one step."""

    def __init__(self, scenario: Scenario, rank: int, run_dir: str | Path, init_method: str,
                 fault_specs: list[FaultSpec] | None = None, device: str | None = None):
        super().__init__(scenario, rank, run_dir, init_method, fault_specs, device)
        self.compute_log = ComputeLog.for_rank(self.run_dir, rank)

    # -- the subclass's part -------------------------------------------------------------
    def build(self) -> torch.nn.Module:
        """Build the wrapped model and optimizer; returns the module whose Linear layers
        ComputeClock times."""
        raise NotImplementedError

    clip_grads = True
    """Whether `train_step` clips the gradients' global norm to run.clip_norm."""

    def train_step(self, step: int) -> float | None:
        """One step (forward, backward, optimizer); this rank's loss, None if it has none.

        This one is data parallel's (DDP, FSDP): the whole model on this DP rank's batch,
        the wrapper's hooks doing the communication; pipelining runs its schedule instead.
        Needs `self.model`, `self.opt` and `self.data` (`step_batches`) from `build`."""
        x, y = self.data[step]
        loss = loss_fn(self.model(x), y)
        loss.backward()
        if self.clip_grads:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.sc.run.clip_norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    def fingerprint(self) -> str | None:
        """Fingerprint of the parameters after a step (equal on DP replicas), or None."""
        return None

    def step_batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """This DP rank's (input, target) of every step, made up front on its device (a
        step's data is the same whatever the workload: `torch_model.batch`)."""
        rows = self.sc.data.tokens_per_microbatch * self.sc.parallel.microbatches
        return [tuple(t.to(self.device) for t in batch(
            s, self.dp_rank, rows, self.sc.model.hidden, self.sc.run.seed))
            for s in range(self.sc.run.steps)]

    # -- setup ---------------------------------------------------------------------------
    def _setup(self) -> None:
        torch.set_num_threads(self.sc.run.threads_per_rank)
        cuda = (self.assigned_device or "").startswith("cuda")
        backend = "nccl" if cuda else "gloo"
        self.device = torch.device(self.assigned_device if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        from stragglerlab.workloads.rendezvous import loopback_store

        store = loopback_store(self.init_method, self.rank, self.sc.world_size, self.timeout)
        dist.init_process_group(backend, store=store, rank=self.rank,
                                world_size=self.sc.world_size, timeout=self.timeout)
        self.backend = backend
        self.ctx = RankContext(self.rank, self.dp_rank, self.stage, cgroup=self.cgroup,
                               run_dir=str(self.run_dir), dp_size=self.dp,
                               device=str(self.device))
        self.faults = FaultHooks(self.fault_specs, self.ctx, self.sc)
        model = self.build()
        share = pace_share(self.sc.run, self.device.type, self.cgroup, self.sc.world_size)
        if share is not None:  # hooks before the clock's: it times Linears with their pacing
            # Isolated: the slow worker cuts the quota, and cores_now carries it. Not
            # isolated: the rank is paced to a rate once settled (below), and the pacer is
            # the slow device (factor_now).
            self.pacer = LinearPacer(
                model, share=share, margin=self.sc.run.pace_margin,
                cores_now=lambda: self.cgroup.get("cores_now") if self.cgroup else None,
                factor_now=lambda: self.ctx.device_factor if self.ctx.paced_to_rate else 1.0)
        self.clock = ComputeClock(model)
        self.faults.setup()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- the run -------------------------------------------------------------------------
    def run(self, cgroup: dict | None = None, net: dict | None = None) -> dict:
        """Set up, train every step, return the summary the launcher collects; always
        undoes faults and leaves the process group. net is unused (no network faults)."""
        self.cgroup = cgroup
        self.faults = FaultHooks([], RankContext(self.rank, self.dp_rank, self.stage))
        self.profiler: KinetoProfiler | None = None
        self.pacer: LinearPacer | None = None
        try:
            self._setup()
            return self._train()
        finally:
            self.faults.undo()
            self.compute_log.close()
            if self.profiler is not None:
                self.profiler.stop()
            if dist.is_initialized():
                dist.destroy_process_group()

    def _train(self) -> dict:
        losses, checksums, step_times = {}, {}, {}
        self.profiler = KinetoProfiler.for_scenario(self.sc, self.rank, self.run_dir, self.device)
        if self.profiler is not None:
            self.profiler.start()
        last = (None, None)
        for step in range(self.sc.run.steps):
            self.faults.step_start(step)
            self.write_status(step - 1, step, *last)
            self.clock.take()
            start = now()
            with self.faults.compute(step):
                loss = self.train_step(step)
                self._sync()
            step_times[step] = now() - start
            self.compute_log.append(step, self.clock.take(), step_times[step])
            self.faults.step_end(step)
            if self.pacer is not None and settles_after(step, self.sc.run.warmup_steps):
                self.pacer.settle()  # a collective, inside the profiler's warm-up step
                # paced to a rate: a slow worker slows the pacer, not by a stretch at the
                # step's end (which the compute log, and so faults.json, would not see)
                self.ctx.paced_to_rate = not self.cgroup
            if self.profiler is not None:
                self.profiler.step()  # ProfilerStep#<step> spans this whole step
            fp = self.fingerprint()
            if fp is not None:
                checksums[step] = fp
            if loss is not None:
                losses[step] = loss
            last = (loss, step_times[step])
        self.write_status(self.sc.run.steps - 1, self.sc.run.steps, *last)
        if self.pacer is not None:
            (self.run_dir / "pacing").mkdir(exist_ok=True)
            atomic_write_text(self.run_dir / "pacing" / f"rank{self.rank}.json",
                              json.dumps(self.pacer.summary()))
        return self.summary(losses, checksums, step_times)

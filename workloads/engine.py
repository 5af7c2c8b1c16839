"""One rank of a DP x PP training job: 1F1B pipeline, distributed optimizer, traced op by op.

Per step, in the order of the trace vocabulary (design.md §3):

1. params-all-gather: every DP rank owns a shard of its stage's flat
   parameters (distributed-optimizer style) and all-gathers the full set;
2. the 1F1B schedule of `workloads.schedule`: forward/backward computes and
   the pipeline P2P ops of `workloads.stage_links` (traced from post to
   completion, so a send's duration includes its peer's lateness);
3. the tail: gc (planned collection when enabled) → layernorm-grads-all-reduce
   (a no-op without tensor parallelism, traced like Megatron's) →
   embedding-grads-all-reduce (tied embedding, first and last stage) →
   grads-reduce-scatter over DP → optimizer-clip-main-grad (global grad
   norm over all ranks) → optimizer (Adam on the local shard).

Every collective and P2P wait has the run's timeout, so a dead or hung peer
fails this rank within it instead of hanging. Used by `workloads.rank_actors`
(one Ray actor per rank); runnable without Ray for debugging:

    trainer = RankTrainer(scenario, rank, run_dir, "tcp://127.0.0.1:29500")
    summary = trainer.run()
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from stragglerlab.injectors.base import RankContext
from stragglerlab.scenarios.dataset import rank_microbatches
from stragglerlab.scenarios.faults import FaultSpec
from stragglerlab.scenarios.partition import microbatch_costs
from stragglerlab.scenarios.scenario import Scenario
from stragglerlab.scenarios.scenario_vocab import Backend
from stragglerlab.trace.schema import OpType
from stragglerlab.util.atomic import atomic_write_text
from stragglerlab.workloads.dist_optimizer import ShardedAdam
from stragglerlab.workloads.fault_hooks import FaultHooks
from stragglerlab.workloads.gc_monitor import GcMonitor
from stragglerlab.workloads.host_staging import HostStaged
from stragglerlab.workloads.model import StageModel
from stragglerlab.workloads.p2p import AsyncP2P
from stragglerlab.workloads.pacing import ComputePacer, pace_share, settles_after
from stragglerlab.workloads.profiling import KinetoProfiler
from stragglerlab.workloads.rank_base import RankTrainerBase
from stragglerlab.workloads.run_queue_monitor import RunQueueMonitor
from stragglerlab.workloads.schedule import ActionKind, Direction, one_f_one_b
from stragglerlab.workloads.stage_links import StageLinks, synchronize
from stragglerlab.workloads.tracer import Tracer, now


class RankTrainer(RankTrainerBase):
    """Training loop of one rank (global rank = stage * dp + dp_rank). Without an assigned
    device the backend rule below decides (cuda:<rank> or cpu)."""

    def __init__(self, scenario: Scenario, rank: int, run_dir: str | Path, init_method: str,
                 fault_specs: list[FaultSpec] | None = None, device: str | None = None):
        super().__init__(scenario, rank, run_dir, init_method, fault_specs, device)
        self.gc_monitor = GcMonitor(self.run_dir / "gc" / f"rank{rank}.jsonl")
        self.cpu_monitor = RunQueueMonitor(self.run_dir / "cpu" / f"rank{rank}.jsonl")
        self.first, self.last = self.stage == 0, self.stage == self.pp - 1
        self.tracer = Tracer(self.run_dir / "trace-parts" / f"rank{rank}.bin",
                             enabled=scenario.run.trace,
                             ranges=scenario.run.profiler.value != "off")

    # -- setup -------------------------------------------------------------------------
    def _backend(self) -> str:
        wanted = self.sc.run.backend
        if wanted is Backend.AUTO and self.assigned_device is not None:
            return "nccl" if self.assigned_device.startswith("cuda") else "gloo"
        if wanted is Backend.AUTO:
            enough_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= \
                self.sc.world_size
            return "nccl" if enough_gpus else "gloo"
        return wanted.value

    def setup(self) -> None:
        """Join the process group, make the groups, build the stage and its flat buffers."""
        torch.set_num_threads(self.sc.run.threads_per_rank)
        backend = self._backend()
        own = self.assigned_device if (self.assigned_device or "").startswith("cuda") else None
        # gloo with a GPU of its own (several ranks sharing one GPU, workloads.local_launcher):
        # compute there, communicate through host memory (workloads.host_staging).
        self.device = torch.device(own or (f"cuda:{self.rank}" if backend == "nccl" else "cpu"))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.comm = HostStaged(staged=backend == "gloo" and self.device.type == "cuda")
        init_method = self.init_method
        if self.net:  # gloo over this rank's own veth (network namespaces, for real shaping)
            from stragglerlab.host.netns import NetTopology

            topo = NetTopology(self.net["run_id"], self.net["world"])
            topo.enter(self.rank)  # this thread and the threads it starts from now on
            os.environ["GLOO_SOCKET_IFNAME"] = topo.rank_ifname(self.rank)
            init_method = f"tcp://{topo.rank_address(0)}:{self.net['port']}"
        if self.net:
            dist.init_process_group(backend, init_method=init_method, rank=self.rank,
                                    world_size=self.sc.world_size, timeout=self.timeout)
        else:  # rank 0's store listens on loopback only (workloads/rendezvous.py)
            from stragglerlab.workloads.rendezvous import loopback_store

            store = loopback_store(init_method, self.rank, self.sc.world_size, self.timeout)
            dist.init_process_group(backend, store=store, rank=self.rank,
                                    world_size=self.sc.world_size, timeout=self.timeout)
        self.backend = backend
        # Every rank creates every group in the same order; new_group needs its own timeout.
        self.dp_group = None
        for s in range(self.pp):
            # Named like Megatron-core's groups: `import kineto` reads the layout from them.
            g = dist.new_group([s * self.dp + d for d in range(self.dp)], timeout=self.timeout,
                               group_desc="DATA_PARALLEL_GROUP")
            if s == self.stage:
                self.dp_group = g
        self.emb_group = None
        if self.pp > 1:
            for d in range(self.dp):
                g = dist.new_group([d, (self.pp - 1) * self.dp + d], timeout=self.timeout,
                                   group_desc="EMBEDDING_GROUP")
                if d == self.dp_rank and (self.first or self.last):
                    self.emb_group = g
        m = self.sc.model
        partition = self.sc.stage_partition()  # balanced by default (costmodel)
        blocks = partition[self.stage]
        # Warm-up-rate pacing runs each compute op at one rate per unit of its modelled work.
        self.partition = partition
        self.model = StageModel(m, self.stage, self.pp, blocks, self.sc.run.seed).to(self.device)
        self.act_shape = (self.sc.data.tokens_per_microbatch, m.hidden)
        self.shared_emb = self.model.shared_embedding()
        tied_copy = self.shared_emb if self.last and not self.first else None
        self.opt = ShardedAdam(list(self.model.parameters()), self.dp, self.dp_rank,
                               self.sc.run.lr, self.device, skip_in_norm=tied_copy)
        self.ctx = RankContext(self.rank, self.dp_rank, self.stage, cgroup=self.cgroup,
                               run_dir=str(self.run_dir), net=self.net, dp_size=self.dp,
                               compute_ops_per_step=2 * self.sc.parallel.microbatches,
                               device=str(self.device))
        self.faults = FaultHooks(self.fault_specs, self.ctx, self.sc)
        self.pacer = ComputePacer(pace_share(self.sc.run, self.device.type, self.cgroup,
                                              self.sc.world_size), self.sc.run.pace_margin,
                                  warmup_rate=self.sc.paced_to_warmup_rate,
                                  stall_s=lambda: self.gc_monitor.paused_s)
        if self.sc.run.planned_gc_every > 0:
            gc.disable()
        gc.collect()
        gc.freeze()  # start-up objects out of the GC's way: a full GC would cost ~80 ms
        self.faults.setup()
        self.gc_monitor.start()

    # -- one step ----------------------------------------------------------------------
    def _paced(self, data, backward: bool = False):
        """The compute op's pacing context: the rank's current CPU share (the slow-worker
        injector writes a lower one while it acts), the op's warm-up-rate slot (forward
        or backward of this stage) and its modelled work on microbatch `data`; off,
        nothing inside the traced op."""
        if self.pacer.cores is None:
            return contextlib.nullcontext()
        return self.pacer.op(self.cgroup.get("cores_now") if self.cgroup else None,
                             slot=self.stage + (self.pp if backward else 0),
                             device_factor=self.ctx.device_factor, work=self._work(data))

    def _work(self, data) -> float:
        """This stage's modelled multiply-adds on microbatch `data`: attention over its
        sequences' sum(s^2) where lengths vary (what a GPU's varlen attention costs), else
        over the whole microbatch, the model the partition is sized by (partition.py)."""
        m, tokens = self.sc.model, self.sc.data.tokens_per_microbatch
        sq = data.seq_len_sq_sum if self.sc.varlen else float(tokens * tokens)
        return microbatch_costs(self.partition, m.hidden, m.vocab, tokens, sq)[self.stage]

    def _sync(self) -> None:
        synchronize(self.device)

    def _make_data(self, step: int) -> list:
        """The step's microbatches as tensors (all steps are made in setup, so data
        preparation never sits between traced ops as untraced launch delay)."""
        sc, batches = self.sc, []
        for data in rank_microbatches(sc.data, sc.model.vocab, sc.model.max_seq_len, sc.run.seed,
                                      step, self.dp_rank, self.dp, sc.parallel.microbatches):
            as_t = lambda a: torch.as_tensor(a, device=self.device)  # noqa: E731
            batches.append((data, as_t(data.tokens), as_t(data.positions), as_t(data.targets)))
        return batches

    def _pipeline(self, step: int, batches: list) -> float:
        """Run the 1F1B computes of one step; returns this rank's summed loss (last stage)."""
        n_mb = self.sc.parallel.microbatches
        F, B = Direction.FORWARD, Direction.BACKWARD
        computes = [a for a in one_f_one_b(self.stage, self.pp, n_mb) if a.is_compute]
        first_bwd = next(i for i, a in enumerate(computes) if a.kind is ActionKind.BACKWARD)
        inputs, outputs = {}, {}
        loss_sum = 0.0
        if not self.first:
            self.links.post_recv(F, 0)
        if not self.last and first_bwd < 2:
            self.links.post_recv(B, 0)
        for i, action in enumerate(computes):
            mb = action.microbatch
            if action.kind is ActionKind.FORWARD:
                data, tokens, pos, tgt = batches[mb]
                if self.first:
                    x = tokens
                else:
                    x = inputs[mb] = self.links.take_recv(F, mb).requires_grad_()
                self._sync()
                with self.tracer.op(OpType.FORWARD_COMPUTE, mb, 0, self.stage,
                                    data.seq_len_sq_sum):
                    with self._paced(data):
                        with self.faults.compute(step):
                            out = self.model(x, pos, data.seq_lens, tgt if self.last else None)
                        if self.last:
                            out = out / n_mb
                    self._sync()
                outputs[mb] = out
                if self.last:
                    loss_sum += float(out.detach())
                else:
                    self.links.send(F, out.detach())
                if not self.first:
                    self.links.post_recv(F, mb + 1)
            else:
                out = outputs.pop(mb)
                grad = None if self.last else self.links.take_recv(B, mb)
                self._sync()
                with self.tracer.op(OpType.BACKWARD_COMPUTE, mb, 0, self.stage):
                    with self._paced(batches[mb][0], backward=True), \
                            self.faults.compute(step):
                        out.backward(grad)
                    self._sync()
                if not self.first:
                    self.links.send(B, inputs.pop(mb).grad)
                if not self.last:
                    self.links.post_recv(B, mb + 1)
            if i == first_bwd - 2 and not self.last:
                self.links.post_recv(B, 0)  # the model's rule for a stage's first backward recv
        return loss_sum

    def _tail(self, step: int) -> None:
        """gc → layernorm → embedding → reduce-scatter → clip → optimizer."""
        self.p2p.quiesce()  # P2P posts share the default group with clip's all-reduce
        every = self.sc.run.planned_gc_every
        with self.tracer.op(OpType.GC, mb_id=0):
            if every > 0 and (step + 1) % every == 0:
                gc.collect()
        with self.tracer.op(OpType.LAYERNORM_GRADS_ALL_REDUCE):
            pass  # all-reduced over tensor-parallel ranks; with tp = 1 there are none
        if self.emb_group is not None:
            self.faults.before_comm()  # outside the traced op: the rank arrives late
            with self.tracer.op(OpType.EMBEDDING_GRADS_ALL_REDUCE):
                self.comm.all_reduce(self.shared_emb.grad, group=self.emb_group)
                self._sync()
        if self.dp > 1:
            self.faults.before_comm()  # outside the traced op: the rank arrives late
            with self.tracer.op(OpType.GRADS_REDUCE_SCATTER, mc=0):
                shard_grad = torch.empty_like(self.opt.master)
                self.comm.reduce_scatter_single(shard_grad, self.opt.flat_grad(),
                                                group=self.dp_group)
                shard_grad /= self.dp
                self._sync()
        else:
            shard_grad = self.opt.flat_grad()
        self.faults.before_comm()  # outside the traced op: the rank arrives late
        with self.tracer.op(OpType.OPTIMIZER_CLIP_MAIN_GRAD):
            sq = self.opt.local_sq_norm(shard_grad)
            self.comm.all_reduce(sq)
            norm = float(sq.sqrt())
            shard_grad *= min(1.0, self.sc.run.clip_norm / (norm + 1e-6))
            self._sync()
        with self.tracer.op(OpType.OPTIMIZER):
            self.opt.step(shard_grad)
            self._sync()
        self.opt.zero_grad()
        self.grad_norm = norm

    def _gather_params(self) -> None:
        if self.dp > 1:
            self.comm.all_gather_single(self.opt.flat, self.opt.master, group=self.dp_group)
        else:
            self.opt.flat.copy_(self.opt.master)

    # -- the run -----------------------------------------------------------------------
    def run(self, cgroup: dict | None = None, net: dict | None = None) -> dict:
        """Set up, train every step, return a summary; always undoes faults and leaves
        the process group. cgroup: this rank's CPU isolation; net: the run's network
        namespaces ({run_id, world, port}); both from the launcher, None when unused."""
        self.cgroup, self.net = cgroup, net
        self.faults = FaultHooks([], RankContext(self.rank, self.dp_rank, self.stage))
        self.profiler: KinetoProfiler | None = None
        try:
            self.setup()
            # Created after setup: its threads must start inside this rank's namespace.
            self.p2p = AsyncP2P(self.timeout, before_send=self.faults.before_send)
            self.links = StageLinks(p2p=self.p2p, tracer=self.tracer, rank=self.rank,
                                    stage=self.stage, dp=self.dp, dp_rank=self.dp_rank,
                                    microbatches=self.sc.parallel.microbatches,
                                    act_shape=self.act_shape, device=self.device,
                                    timeout=self.timeout, staged=self.comm.staged)
            return self._train()
        finally:
            self.faults.undo()
            self.gc_monitor.stop()
            if hasattr(self, "p2p"):
                self.p2p.close()
            self.tracer.close()
            if self.profiler is not None:
                self.profiler.stop()
            if dist.is_initialized():
                dist.destroy_process_group()

    def _train(self) -> dict:
        losses, checksums, step_times = {}, {}, {}
        data = [self._make_data(step) for step in range(self.sc.run.steps)]
        reported = (None, None)  # the last finished step's (loss, time), for the status file
        self.profiler = KinetoProfiler.for_scenario(self.sc, self.rank, self.run_dir, self.device)
        if self.profiler is not None:
            self.profiler.start()
        for step in range(self.sc.run.steps):
            batches = data[step]
            self.faults.step_start(step)
            self.write_status(step - 1, step, *reported)
            self.tracer.begin_step(step)
            self.gc_monitor.step = step
            self.cpu_monitor.begin()
            step_start = now()
            if self.dp > 1:
                self.faults.before_comm()  # outside the traced op: the rank arrives late
                with self.tracer.op(OpType.PARAMS_ALL_GATHER, mc=0):
                    self._gather_params()
                    self._sync()
            else:  # no DP: nothing to gather, and no DP op in the trace
                self._gather_params()
            loss = self._pipeline(step, batches)
            self._tail(step)
            step_times[step] = now() - step_start
            self.cpu_monitor.end(step)
            self.p2p.drain()  # long complete: every rank passed the clip all-reduce
            # The gathered params are untouched until the next gather: fingerprint them
            # here, between steps, not between traced ops.
            checksums[step] = self.opt.fingerprint(stride=101)
            self.faults.step_end(step)
            if step == 0 and self.sc.run.warmup_steps >= 2:
                self.pacer.forget()  # the cold first step's op times are not the device's
            if settles_after(step, self.sc.run.warmup_steps):
                self.pacer.settle(2 * self.pp, pp=self.pp)  # a collective
                self.ctx.paced_to_rate = self.pacer.settled
            self.tracer.end_step()
            if self.profiler is not None:
                self.profiler.step()  # ProfilerStep#<step> spans this whole step
            self.gc_monitor.flush()
            self.cpu_monitor.flush()
            if self.last:
                losses[step] = loss
            # Reported with the next step's start (one status write per step).
            reported = (loss if self.last else None, step_times[step])
        self.write_status(self.sc.run.steps - 1, self.sc.run.steps, *reported)
        if self.pacer.samples:
            (self.run_dir / "pacing").mkdir(exist_ok=True)
            atomic_write_text(self.run_dir / "pacing" / f"rank{self.rank}.json",
                              json.dumps(self.pacer.samples))
        self._gather_params()
        checksums[self.sc.run.steps] = self.opt.fingerprint()
        return self.summary(losses, checksums, step_times)

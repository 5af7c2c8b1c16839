"""The what-if's replays of the traced job, in one process or split by steps (design.md §4.3).

After the cross-step statistics (each op type's ideal duration, over every step
and DP rank) are known, every replay the what-if needs is a function of one
step's values alone: `simulate` replays each (step, variant) batch element on
its own, and a step's time is a max and a min over its own ops and lanes. So
the replays split by steps, each part anywhere, and the step times put back in
step order are bit for bit those of one process (the replay adds and takes
maxima, IEEE-exact operations; no sum runs across steps). The means over steps
stay with the caller, over the whole merged series, as in one process. The
launch attribution's replays (analysis.launch: the launch delays put back) split
the same way, each part keeping its steps' delays (set_delays).

    replays = Replays(graph, value)                  # one process (the default)
    t = replays.mixed(ideal, mask, keep_original=True)
    split = ChunkedReplays(call)                     # parts replayed elsewhere, merged here

`ChunkedReplays` holds no worker of its own: `call(method, args)` runs a
`Replays` method on every step part and returns the parts' results in step
order (stragglerlab.whatif_ray does that with Ray actors, one part each).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from stragglerlab.analysis.graph import DepGraph
from stragglerlab.analysis.launch import restore_each_dp_rank_delays
from stragglerlab.analysis.simulate import CHUNK_ELEMENTS, Mixed, simulate


class StepReplays(Protocol):
    """The replays the what-if asks for; each returns step times [n_steps], s."""

    def nodelay(self) -> np.ndarray:
        """The trace's values replayed without launch delays (T per step)."""

    def mixed(self, ideal: np.ndarray, mask: np.ndarray, keep_original: bool) -> np.ndarray:
        """The trace with the masked ops' values (keep_original) or the other ops' values
        replaced by `ideal` (per node); mask is [n_nodes, 1, 1 or dp], the same in every
        step, so each step part applies it as it is."""

    def each_dp_rank(self, ideal: np.ndarray) -> dict[int, np.ndarray]:
        """For every DP rank d: the ideal with rank d's original values."""

    def set_delays(self, delay: np.ndarray) -> None:
        """The launch delays [n_nodes, n_steps, dp] the two methods below put back."""

    def delays_restored(self, mask: np.ndarray) -> np.ndarray:
        """The trace's values with the masked ops' launch delays (analysis.launch)."""

    def each_dp_rank_delays(self) -> dict[int, np.ndarray]:
        """For every DP rank d: the trace's values with rank d's launch delays."""


ReplaysFactory = Callable[[DepGraph, np.ndarray], StepReplays]
"""Makes the replays of a graph and its sim values [n_nodes, n_steps, dp]."""


class Replays:
    """The replays in this process (what `run_whatif` uses unless told otherwise)."""

    def __init__(self, graph: DepGraph, value: np.ndarray) -> None:
        self.graph = graph
        """The dependency graph."""
        self.value = value
        """Sim values (transfer for comm ops, else duration), [n_nodes, n_steps, dp]."""
        self.delay: np.ndarray | None = None
        """Launch delays, same shape (set_delays; only the launch attribution needs them)."""

    def nodelay(self) -> np.ndarray:
        return simulate(self.graph, self.value).step_time

    def mixed(self, ideal: np.ndarray, mask: np.ndarray, keep_original: bool) -> np.ndarray:
        ideal_full = ideal[:, None, None]
        mine, other = (self.value, ideal_full) if keep_original else (ideal_full, self.value)
        return simulate(self.graph, Mixed(mask, mine, other, self.value.shape)).step_time

    def each_dp_rank(self, ideal: np.ndarray) -> dict[int, np.ndarray]:
        return restore_each_dp_rank(self.graph, self.value, ideal)

    def set_delays(self, delay: np.ndarray) -> None:
        self.delay = delay

    def delays_restored(self, mask: np.ndarray) -> np.ndarray:
        return simulate(self.graph, self.value, np.where(mask, self.delay, 0.0)).step_time

    def each_dp_rank_delays(self) -> dict[int, np.ndarray]:
        return restore_each_dp_rank_delays(self.graph, self.value, self.delay)


def restore_each_dp_rank(graph: DepGraph, value: np.ndarray, ideal: np.ndarray) -> dict:
    """Step times of 'ideal with DP rank d original' for every d, in batched simulations.

    Only d differs from the ideal, and all other ranks are identical, so each
    variant needs two lanes: rank d and one idealized representative. Ranks are
    batched in chunks so the [node, rank, step, lane] working set stays bounded.
    """
    n_nodes, n_steps, dp = value.shape
    lanes = 2 if dp > 1 else 1
    per_rank = n_nodes * n_steps * lanes
    chunk = max(1, CHUNK_ELEMENTS // per_rank)
    times = {}
    for lo in range(0, dp, chunk):
        ranks = range(lo, min(dp, lo + chunk))
        batched = np.empty((n_nodes, len(ranks), n_steps, lanes))
        batched[:, :, :, 0] = value[:, :, ranks.start:ranks.stop].transpose(0, 2, 1)
        if lanes == 2:
            batched[:, :, :, 1] = ideal[:, None, None]
        flat = batched.reshape(n_nodes, len(ranks) * n_steps, lanes)
        step_times = simulate(graph, flat).step_time.reshape(len(ranks), n_steps)
        times.update({d: step_times[i] for i, d in enumerate(ranks)})
    return times


def step_parts(n_steps: int, n_parts: int) -> list[slice]:
    """n_parts contiguous, non-empty step ranges covering [0, n_steps), sizes within one
    of each other (at most n_steps parts)."""
    if n_steps < 1 or n_parts < 1:
        raise ValueError(f"cannot split {n_steps} steps into {n_parts} parts")
    n = min(n_parts, n_steps)
    bounds = [n_steps * i // n for i in range(n + 1)]
    return [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


Call = Callable[[str, Sequence[tuple]], Sequence]
"""call(method, args of each part): that StepReplays method run on every step part with
its own arguments (often the same object for every part), results in step order."""


class ChunkedReplays:
    """StepReplays over step parts replayed elsewhere, merged back in step order."""

    def __init__(self, call: Call, parts: Sequence[slice]) -> None:
        self.call = call
        """Runs a method on every part (see Call)."""
        self.parts = list(parts)
        """The parts' steps (step_parts), in order."""

    def _same(self, method: str, *args: object) -> list:
        return list(self.call(method, [args] * len(self.parts)))

    def nodelay(self) -> np.ndarray:
        return np.concatenate(self._same("nodelay"))

    def mixed(self, ideal: np.ndarray, mask: np.ndarray, keep_original: bool) -> np.ndarray:
        return np.concatenate(self._same("mixed", ideal, mask, keep_original))

    def each_dp_rank(self, ideal: np.ndarray) -> dict[int, np.ndarray]:
        return _merged(self._same("each_dp_rank", ideal))

    def set_delays(self, delay: np.ndarray) -> None:
        self.call("set_delays", [(np.ascontiguousarray(delay[:, p]),) for p in self.parts])

    def delays_restored(self, mask: np.ndarray) -> np.ndarray:
        return np.concatenate(self._same("delays_restored", mask))

    def each_dp_rank_delays(self) -> dict[int, np.ndarray]:
        return _merged(self._same("each_dp_rank_delays"))


def _merged(parts: list[dict]) -> dict:
    """Per DP rank, the parts' step times joined in step order."""
    return {d: np.concatenate([p[d] for p in parts]) for d in parts[0]}


class ThreadReplays:
    """Makes StepReplays whose step parts replay on `threads` threads of this process.

    The replay's array work releases the GIL, so on a machine with cores to spare the
    parts overlap; the step times are those of one thread bit for bit (the module doc).
    Use as a context manager: the threads stop when it closes.

        with ThreadReplays(2) as replays:
            run_whatif(df, meta, where, replays=replays)
    """

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self.threads = threads
        """How many step parts, one thread each."""
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> ThreadReplays:
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="replays")
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __call__(self, graph: DepGraph, value: np.ndarray) -> StepReplays:
        parts = step_parts(value.shape[1], self.threads)
        if len(parts) == 1 or self._pool is None:
            return Replays(graph, value)
        workers = [Replays(graph, value[:, p]) for p in parts]
        pool = self._pool

        def call(method: str, args: Sequence[tuple]) -> list:
            runs = [pool.submit(getattr(w, method), *a) for w, a in zip(workers, args)]
            return [r.result() for r in runs]

        return ChunkedReplays(call, parts)

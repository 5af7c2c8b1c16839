"""Per-rank CPU isolation with cgroup v1 CFS quotas: each training rank gets a fixed CPU share.

Why: Ray runs one actor process per training rank, and on a 2-core machine 4-8
ranks share 2 cores. Then contention, not the job's critical path, sets the
step time, and a slow rank is invisible: it just gets a bigger share of the
cores while the others wait. Giving every rank a fixed share of its own
(`cpu.cfs_quota_us` / `cpu.cfs_period_us`, quota = period x cores) makes the
ranks independent, like GPUs: with 4 ranks at 0.5 core each, halving one rank's
share doubled its compute, as a slow GPU would. A fault injector lowers one
rank's share mid-run (`set_share`) to make a slow worker.

Only cgroup v1 works here: the v2 hierarchy (`cpu.max`) has no cpu controller on
these machines. cpu and cpuacct may be separate v1 mounts (they are here:
/sys/fs/cgroup/cpu and /sys/fs/cgroup/cpuacct); the same directories are made in
both so `usage_s` can read `cpuacct.usage`. Everything lives under
`<cpu mount>/stragglerlab/<run_id>/rank<r>`, and this module never touches a
cgroup outside `.../stragglerlab/`.

cgroupfs cannot hold an ordinary file, so the creator's PID (and its start time,
against PID reuse) is recorded in `/tmp/stragglerlab-cgroups/<run_id>.json`;
`cleanup_stale()` (run by every `create`) removes the cgroups of runs whose
creator is gone, e.g. a SIGKILLed driver.

    ok, why = CpuIsolation.available()
    if not ok:
        print(f"CPU isolation off ({why}): ranks share the cores unisolated")
    else:
        with CpuIsolation.create("run-42", n_ranks=4, cores_per_rank=0.5) as iso:
            iso.assign(rank, actor_pid)     # once per rank, all its threads move
            iso.set_share(2, 0.25)          # slow worker: rank 2 now computes 2x slower
            iso.usage_s(2)                  # CPU seconds rank 2 used in its cgroup
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.util.errors import InputError

BASE = "stragglerlab"
"""Directory under each cgroup v1 mount that holds every run of this module."""
STATE_DIR = Path("/tmp/stragglerlab-cgroups")
"""Side files `<run_id>.json`: creator pid + start time and the cgroup paths of a run."""
MIN_QUOTA_US = 1000
"""The kernel rejects CFS quotas and periods below 1 ms."""
MAX_PERIOD_US = 1_000_000
"""The kernel rejects CFS periods above 1 s."""
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def quota_for(cores: float, base_period_us: int) -> tuple[int, int]:
    """(period, quota) in us giving `cores`: the one home of the quota/period rule.

    The period grows past `base_period_us` when the quota would fall below the
    kernel's 1 ms floor (many ranks on few cores, or a deep slowdown of an
    already small share); the quota never goes below that floor.
    """
    period = max(base_period_us, math.ceil(MIN_QUOTA_US / cores))
    return period, max(MIN_QUOTA_US, int(round(cores * period)))


class IsolationError(RuntimeError):
    """A cgroup operation failed (no controller, not root, process gone, ...)."""


def _cgroup_mounts() -> tuple[Path | None, Path | None]:
    """Mount points of the cgroup v1 hierarchies holding the cpu and cpuacct controllers.

    Read from /proc/self/mounts rather than assumed: elsewhere cpu and cpuacct are
    often one co-mounted hierarchy (`cpu,cpuacct`), here they are two.
    """
    cpu = acct = None
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split()
        if len(parts) < 4 or parts[2] != "cgroup":  # "cgroup2" is v2: no cpu controller here
            continue
        opts = parts[3].split(",")
        if cpu is None and "cpu" in opts:
            cpu = Path(parts[1])
        if acct is None and "cpuacct" in opts:
            acct = Path(parts[1])
    return cpu, acct


def _start_time(pid: int) -> int | None:
    """Start time of a process (clock ticks since boot), None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces, so split after its ")".
    return int(stat.rsplit(")", 1)[1].split()[19])


def _alive(pid: int, start_time: int | None) -> bool:
    """True if the process still exists and is the same one (not a reused PID)."""
    now = _start_time(pid)
    return now is not None and (start_time is None or now == start_time)


def _ncpus() -> int:
    return len(os.sched_getaffinity(0))


def _move_all(cgroup: Path, root: Path) -> None:
    """Move every process of `cgroup` into the hierarchy's root cgroup (which always exists)."""
    try:
        pids = (cgroup / "cgroup.procs").read_text().split()
    except FileNotFoundError:
        return
    for pid in pids:
        try:
            (root / "cgroup.procs").write_text(pid)
        except ProcessLookupError:  # exited meanwhile
            pass


def _remove(run_dirs: list[Path], roots: list[Path]) -> list[Path]:
    """Empty and remove the rank dirs, then the run dirs; return what could not be removed.

    Already-removed dirs are fine. rmdir fails with EBUSY while a process is
    inside (one may fork between the move and the rmdir), so it retries briefly.
    """
    left: list[Path] = []
    for run_dir, root in zip(run_dirs, roots):
        ranks = sorted(run_dir.glob("rank*")) if run_dir.is_dir() else []
        for d in [*ranks, run_dir]:
            for attempt in range(20):
                _move_all(d, root)
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or attempt == 19:
                        left.append(d)
                        break
                    time.sleep(0.01)
    return left


def _safe_run_dir(path: str, roots: list[Path]) -> Path | None:
    """The path if it is a run dir directly under `<mount>/stragglerlab/`, else None."""
    p = Path(path)
    ok = any(p.parent == r / BASE and _RUN_ID.fullmatch(p.name) for r in roots)
    return p if ok else None


def cleanup_stale(state_dir: Path = STATE_DIR) -> list[str]:
    """Remove the cgroups of runs whose creating process is dead; return their run ids.

    Only run dirs recorded in a side file and lying directly under
    `<cpu|cpuacct mount>/stragglerlab/` are touched; processes left inside (e.g. Ray
    actors of a SIGKILLed driver) move to the root cgroup, unlimited again.
    """
    cpu, acct = _cgroup_mounts()
    roots = [r for r in (cpu, acct) if r is not None]
    removed = []
    for side in sorted(Path(state_dir).glob("*.json")):
        try:
            rec = json.loads(side.read_text())
            pid, start = int(rec["pid"]), rec.get("start_time")
            paths = [str(p) for p in rec["run_dirs"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written right now, or not ours: leave it
        if _alive(pid, start):
            continue
        dirs = [d for p in paths if (d := _safe_run_dir(p, roots)) is not None]
        if len(dirs) != len(paths):
            continue  # a path outside .../stragglerlab/: never touch it
        run_roots = [next(r for r in roots if d.parent == r / BASE) for d in dirs]
        if not _remove(dirs, run_roots):
            side.unlink(missing_ok=True)
            removed.append(side.stem)
    return removed


@dataclass
class CpuIsolation:
    """One run's per-rank cgroups; make it with `create`, undo it with `cleanup` (or `with`)."""

    run_id: str
    """Name of the run: the cgroup dir `<cpu mount>/stragglerlab/<run_id>`."""
    n_ranks: int
    """Number of ranks, one cgroup `rank<r>` each."""
    period_us: int
    """CFS period, us: the quota is refilled this often (4-10 ms keeps throttling fine-grained)."""
    cpu_dir: Path
    """Run dir in the cpu hierarchy (quotas)."""
    acct_dir: Path | None = None
    """Run dir in a separate cpuacct hierarchy (usage), None if co-mounted with cpu or absent."""
    usage_dir: Path | None = None
    """Run dir whose rank dirs hold cpuacct.usage, None without a cpuacct controller."""
    state_file: Path = field(default_factory=Path)
    """Side file recording the creator's pid, for cleanup_stale."""

    @staticmethod
    def available() -> tuple[bool, str]:
        """(True, "") if cgroup v1 CPU quotas can be set here, else (False, why not)."""
        if os.geteuid() != 0:
            return False, "not root (cgroup quotas need root)"
        cpu, _ = _cgroup_mounts()
        if cpu is None:
            return False, "no cgroup v1 cpu controller mounted (cgroup v2 has none here)"
        if not (cpu / "cpu.cfs_quota_us").exists():
            return False, f"no CFS bandwidth control (cpu.cfs_quota_us) under {cpu}"
        try:  # the real test: a read-only or foreign cgroupfs refuses this
            (cpu / BASE).mkdir(exist_ok=True)
        except OSError as e:
            return False, f"cannot create {cpu / BASE}: {e.strerror}"
        return True, ""

    @classmethod
    def create(cls, run_id: str, n_ranks: int, cores_per_rank: float,
               period_us: int = 10_000, state_dir: Path = STATE_DIR) -> CpuIsolation:
        """Make `n_ranks` cgroups with `cores_per_rank` cores each (after cleanup_stale)."""
        if not _RUN_ID.fullmatch(run_id):
            raise InputError(f"run_id {run_id!r}: use letters, digits, '.', '_', '-' "
                             "(at most 128, not starting with '.' or '-')")
        if n_ranks < 1:
            raise InputError(f"n_ranks must be >= 1, got {n_ranks}")
        if not MIN_QUOTA_US <= period_us <= MAX_PERIOD_US:
            raise InputError(f"period_us must be in [{MIN_QUOTA_US}, {MAX_PERIOD_US}] "
                             f"(4000-10000 recommended), got {period_us}")
        ok, why = cls.available()
        if not ok:
            raise IsolationError(f"CPU isolation unavailable: {why}")
        cleanup_stale(state_dir)
        cpu, acct = _cgroup_mounts()
        assert cpu is not None  # available() checked
        separate_acct = acct is not None and acct != cpu
        iso = cls(run_id, n_ranks, period_us, cpu / BASE / run_id,
                  acct / BASE / run_id if separate_acct else None,
                  None if acct is None else acct / BASE / run_id,
                  Path(state_dir) / f"{run_id}.json")
        iso._check_total([cores_per_rank] * n_ranks)
        if iso.cpu_dir.exists() or (iso.acct_dir and iso.acct_dir.exists()):
            raise IsolationError(f"cgroup run {run_id!r} already exists ({iso.cpu_dir}); "
                                 "pick another run_id or clean it up")
        # The side file comes first: a crash after any mkdir still leaves a record.
        state = {"pid": os.getpid(), "start_time": _start_time(os.getpid()),
                 "run_dirs": [str(d) for d in iso._run_dirs()]}
        iso.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = iso.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(iso.state_file)
        try:
            for d in iso._run_dirs():
                (d.parent).mkdir(exist_ok=True)
                d.mkdir()
                for r in range(n_ranks):
                    (d / f"rank{r}").mkdir()
            for r in range(n_ranks):
                # Period before quota: the kernel checks the quota against the new period.
                iso._write(r, "cpu.cfs_period_us", period_us)
                iso._write(r, "cpu.cfs_quota_us", iso._quota(cores_per_rank))
        except BaseException:
            iso.cleanup()
            raise
        return iso

    def rank_cpu_dir(self, rank: int) -> Path:
        """The cpu-controller cgroup directory of a rank (for rank-side quota changes)."""
        return self._rank_dir(rank)

    def _run_dirs(self) -> list[Path]:
        return [self.cpu_dir] + ([self.acct_dir] if self.acct_dir else [])

    def _rank_dir(self, rank: int, run_dir: Path | None = None) -> Path:
        if not (isinstance(rank, int) and 0 <= rank < self.n_ranks):
            raise InputError(f"rank must be in 0..{self.n_ranks - 1}, got {rank!r}")
        return (run_dir or self.cpu_dir) / f"rank{rank}"

    def _write(self, rank: int, name: str, value: int) -> None:
        path = self._rank_dir(rank) / name
        try:
            path.write_text(str(value))
        except OSError as e:
            raise IsolationError(f"writing {value} to {path}: {e.strerror}") from e

    def _quota(self, cores: float) -> int:
        """Quota in us for `cores` cores, with the range checks the kernel would make."""
        quota = round(cores * self.period_us)
        if not (cores > 0 and quota >= MIN_QUOTA_US):
            raise InputError(f"CPU share {cores} cores is below the minimum "
                             f"{MIN_QUOTA_US / self.period_us:g} for period {self.period_us} us "
                             "(the kernel's quota floor is 1 ms): raise it or the period")
        if cores > _ncpus():
            raise InputError(f"CPU share {cores} cores exceeds the {_ncpus()} CPUs available")
        return quota

    def _check_total(self, shares: list[float]) -> None:
        """Shares adding up to more than the CPUs would bring back the contention we remove."""
        total, n = sum(shares), _ncpus()
        if total > n + 1e-9:
            raise InputError(f"rank CPU shares add up to {total:g} cores, more than the {n} "
                             "CPUs available: the ranks would contend again; lower the shares")

    def assign(self, rank: int, pid: int) -> None:
        """Move process `pid` with all its threads (and its future children) into rank's cgroup."""
        for run_dir in self._run_dirs():
            path = self._rank_dir(rank, run_dir) / "cgroup.procs"
            try:
                path.write_text(str(pid))
            except ProcessLookupError as e:
                raise IsolationError(f"cannot assign pid {pid} to rank {rank}: "
                                     "no such process") from e
            except OSError as e:
                raise IsolationError(f"writing pid {pid} to {path}: {e.strerror}") from e

    def set_share(self, rank: int, cores: float) -> None:
        """Change rank's CPU share live, in cores (0.25 = a quarter of one core)."""
        quota = self._quota(cores)
        self._check_total([cores if r == rank else self.share(r) for r in range(self.n_ranks)])
        self._write(rank, "cpu.cfs_quota_us", quota)

    def share(self, rank: int) -> float:
        """Rank's current CPU share in cores, read back from the kernel."""
        d = self._rank_dir(rank)
        quota = int((d / "cpu.cfs_quota_us").read_text())
        return float("inf") if quota < 0 else quota / int((d / "cpu.cfs_period_us").read_text())

    def usage_s(self, rank: int) -> float | None:
        """CPU seconds used in rank's cgroup since it was made (cpuacct.usage), None without
        a cpuacct controller (v1 cpu.stat has only throttling counters, no usage)."""
        if self.usage_dir is None:
            return None
        return int((self._rank_dir(rank, self.usage_dir) / "cpuacct.usage").read_text()) / 1e9

    def cpu_stat(self, rank: int) -> dict[str, int]:
        """Rank's cpu.stat: nr_periods, nr_throttled, throttled_time (ns), ... ."""
        text = (self._rank_dir(rank) / "cpu.stat").read_text()
        return {k: int(v) for k, v in (line.split() for line in text.splitlines())}

    def cleanup(self) -> list[Path]:
        """Move the processes left back to the root cgroup, remove the run's dirs and side file.

        Idempotent and never raises on dirs already gone; returns the dirs that could
        not be removed (then the side file stays, so cleanup_stale retries later).
        """
        cpu, acct = _cgroup_mounts()
        roots = [cpu] + ([acct] if self.acct_dir else [])
        left = _remove(self._run_dirs(), [r for r in roots if r is not None])
        if not left:
            self.state_file.unlink(missing_ok=True)
        return left

    def __enter__(self) -> CpuIsolation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

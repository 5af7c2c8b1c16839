"""Which DP rank and pipeline stage each global rank of an imported job is.

Two sources, in this order:

1. `--layout dp=N,pp=M[,tp=K]`: Megatron's default rank order (tp fastest,
   then dp, then pp): rank = (stage * dp + dp_rank) * tp + tp_rank. With
   tp = 1 this is our testbed's rank = stage * dp + dp_rank.
2. The traces' `distributedInfo.pg_config`: process groups named like
   Megatron-core names them (`pg_desc`): DATA_PARALLEL_GROUP gives dp and
   each rank's dp_rank (its position in the group's `ranks`),
   PIPELINE_MODEL_PARALLEL_GROUP the stage (position in its group; without
   one, stage = rank // (dp * tp)), TENSOR_MODEL_PARALLEL_GROUP tp.

    layout = Layout.parse("dp=2,pp=2")
    dp_rank, stage, tp_rank = layout.coords(rank)
"""

from __future__ import annotations

from dataclasses import dataclass

from stragglerlab.util.errors import InputError

DP_DESC = "DATA_PARALLEL_GROUP"
PP_DESC = "PIPELINE_MODEL_PARALLEL_GROUP"
TP_DESC = "TENSOR_MODEL_PARALLEL_GROUP"
ORDER_DOC = "Megatron rank order: rank = (stage * dp + dp_rank) * tp + tp_rank"


@dataclass(frozen=True)
class Layout:
    """Parallel degrees, with each rank's coordinates (computed or from process groups)."""

    dp: int
    """Data-parallel degree."""
    pp: int
    """Pipeline stages."""
    tp: int = 1
    """Tensor-parallel degree (only tp_rank 0 is imported: one worker per DP x PP cell)."""
    source: str = "--layout"
    """Where it came from: '--layout' or 'pg_config'."""
    explicit: tuple = ()
    """(rank, dp_rank, stage, tp_rank) tuples read from process groups; empty = rank order."""

    @classmethod
    def parse(cls, text: str) -> Layout:
        """'dp=2,pp=4[,tp=1]' -> Layout; InputError on anything else."""
        if not text.strip():
            raise InputError("--layout is empty: want dp=N,pp=M[,tp=K] with positive "
                             "integers, e.g. --layout dp=2,pp=4, or leave --layout out to "
                             "take the layout from the traces' process groups")
        sizes: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = part.partition("=")
            if key not in ("dp", "pp", "tp") or not value.strip().isdigit():
                raise InputError(f"--layout {text!r}: want dp=N,pp=M[,tp=K] with positive "
                                 f"integers, e.g. --layout dp=2,pp=4")
            if key in sizes:
                raise InputError(f"--layout {text!r}: {key} is given twice; give each of dp, "
                                 "pp (and tp) once, e.g. --layout dp=2,pp=4")
            sizes[key] = int(value)
        if "dp" not in sizes or "pp" not in sizes or min(sizes.values()) < 1:
            raise InputError(f"--layout {text!r}: give at least dp and pp, each >= 1, "
                             "e.g. --layout dp=2,pp=4")
        return cls(sizes["dp"], sizes["pp"], sizes.get("tp", 1))

    @property
    def world_size(self) -> int:
        """dp * pp * tp."""
        return self.dp * self.pp * self.tp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(dp_rank, stage, tp_rank) of a global rank."""
        for r, dp_rank, stage, tp_rank in self.explicit:
            if r == rank:
                return dp_rank, stage, tp_rank
        return (rank // self.tp) % self.dp, rank // (self.tp * self.dp), rank % self.tp


def rank_lists(pg_config: list | None) -> list[list[int]]:
    """The member lists of a rank's pg_config entries that are well formed (a dict whose
    `ranks` is a list of ints); the others are skipped."""
    out = []
    for pg in pg_config or ():
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        if isinstance(ranks, list) and all(type(r) is int for r in ranks):
            out.append(ranks)
    return out


def _group(pgs: list, desc: str, rank: int) -> list[int] | None:
    for pg in pgs:
        if not isinstance(pg, dict) or str(pg.get("pg_desc", "")).upper() != desc:
            continue
        ranks = pg.get("ranks")
        # A malformed member list (not all ints) is skipped, as rank_lists does.
        if isinstance(ranks, list) and all(type(r) is int for r in ranks) and rank in ranks:
            return list(ranks)
    return None


def from_pg_config(pg_configs: dict[int, list], world: int, where: str) -> Layout:
    """The layout from every rank's pg_config (rank -> list of process-group dicts)."""
    hint = (f"pass --layout dp=N,pp=M[,tp=K] ({ORDER_DOC}), or name the groups with "
            f"torch.distributed.new_group(..., group_desc='{DP_DESC}') as Megatron-core does")
    if world == 1:
        return Layout(1, 1, 1, source="pg_config")
    coords, sizes, groups = [], set(), {}
    for rank, pgs in sorted(pg_configs.items()):
        dp_group = groups[rank] = _group(pgs, DP_DESC, rank)
        if dp_group is None:
            raise InputError(f"rank {rank}'s distributedInfo.pg_config has no process group "
                             f"'{DP_DESC}' holding it, so its DP rank and stage are unknown; "
                             + hint, where)
        tp_group = _group(pgs, TP_DESC, rank) or [rank]
        pp_group = _group(pgs, PP_DESC, rank)
        dp, tp = len(dp_group), len(tp_group)
        if world % (dp * tp):
            raise InputError(f"rank {rank}: world_size {world} is not a multiple of its DP group "
                             f"size {dp} x TP group size {tp}; " + hint, where)
        pp = world // (dp * tp)
        stage = pp_group.index(rank) if pp_group else rank // (dp * tp)
        coords.append((rank, dp_group.index(rank), stage, tp_group.index(rank)))
        sizes.add((dp, pp, tp))
    if len(sizes) != 1:
        raise InputError(f"the ranks' process groups disagree on the layout ({sorted(sizes)}); "
                         + hint, where)
    for rank, group in sorted(groups.items()):  # one job: a DP group is the same to its members
        odd = [m for m in group if m in groups and groups[m] != group]
        if odd:
            raise InputError(f"rank {rank}'s '{DP_DESC}' is {group} but rank {odd[0]} lists "
                             f"{groups[odd[0]]}: the traces' process groups are not one job's; "
                             + hint, where)
    dp, pp, tp = sizes.pop()
    seen = {c[1:] for c in coords}
    if len(seen) != len(coords):
        raise InputError("two ranks map to the same (dp_rank, stage, tp_rank) in their process "
                         "groups; " + hint, where)
    return Layout(dp, pp, tp, source="pg_config", explicit=tuple(coords))

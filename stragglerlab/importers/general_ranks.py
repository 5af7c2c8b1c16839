"""Each rank's role in an unannotated import where no layout names it (the checks of its
ranks and steps are stragglerlab.importers.rank_checks', shared with the vocabulary path)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.trace.op_model import P2P_KINDS


def rank_roles(ops: pd.DataFrame) -> np.ndarray:
    """Each row's role where no layout is known: its rank's, the multiset of communication
    kinds (P2P split by peer direction) that most of the rank's steps issue, a tie going to
    the multiset more (rank, step)s of the job issue. Per rank, not per step: a step that
    lost events (a sampled or damaged trace) put a rank in another stage's role for that
    step, and a clean pipeline would read S below 1 (the damaged-trace fuzz tests)."""
    label = np.where(ops["kind"].isin(P2P_KINDS),
                     ops["kind"] + np.where(ops["peer"] > ops["rank"], "+", "-"), ops["kind"])
    sig = pd.Series(label, index=ops.index).groupby([ops["rank"], ops["step"]]).transform(
        lambda s: "|".join(sorted(s)))
    per = pd.DataFrame({"rank": ops["rank"], "step": ops["step"], "sig": sig}) \
        .drop_duplicates(["rank", "step"])
    per["job"] = per["sig"].map(per["sig"].value_counts())
    per["own"] = per.groupby(["rank", "sig"])["step"].transform("size")
    per = per.sort_values(["rank", "own", "job", "sig"], ascending=[True, False, False, True])
    chosen = per.drop_duplicates("rank").set_index("rank")["sig"]
    return pd.factorize(ops["rank"].map(chosen))[0]


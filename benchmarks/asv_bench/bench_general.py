"""The general what-if (an unannotated import's op table) at DP 256, 1,024 and 4,096 x PP 2, with
the pipeline's forward receives posted ahead: the schedule, the replays of every ideal and
the attribution (analysis/whatif_general.py)."""

from __future__ import annotations

from .inputs import general_ops_at_dp

SIZES = [256, 1024, 4096]


class GeneralWhatIf:
    params = SIZES
    param_names = ["dp"]
    timeout = 600
    number = 1
    repeat = (1, 5, 60.0)

    def setup(self, dp):
        self.ops = general_ops_at_dp(dp)

    def time_whatif_general(self, dp):
        from stragglerlab.analysis.whatif_general import whatif_general

        whatif_general(self.ops)

    def time_schedule(self, dp):
        from stragglerlab.analysis.general_sim import schedule

        schedule(self.ops)

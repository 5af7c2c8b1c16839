# The whole study, end to end: train -> whatif -> detect -> score -> figures -> report.
#
#   .venv/bin/snakemake --cores 2                    # default suite -> results/report.html
#   .venv/bin/snakemake --cores 2 --configfile config/smoke.yaml   # CI smoke suite
#   .venv/bin/snakemake -n                           # the DAG, nothing run
#
# Config: config/workflow.yaml (checked at parse time against
# config/workflow.schema.yaml, then semantically, see rules/common.smk); rules in
# rules/*.smk, each a thin call of one `stragglerlab` verb with quoted paths and a
# log under results/logs/. Every computation is one DAG step, computed once:
#
#   train -> whatif (the only what-if analysis of a run) -> detect {offline,online}
#         -> score;  whatif (+ whatif_reference for the artifact's traces)
#         -> figure_<NAME> (one rule per figure) -> report
#
# Layout and --keep-going semantics: README, section Workflow.

from pathlib import Path

configfile: str(Path(workflow.basedir) / "config" / "workflow.yaml")


include: "rules/common.smk"
include: "rules/train.smk"
include: "rules/whatif.smk"
include: "rules/detect.smk"
include: "rules/score.smk"
include: "rules/figures.smk"
include: "rules/report.smk"


# Every run's files are targets too: snakemake does not rebuild a missing intermediate
# file whose consumers are up to date, and a deleted trace must rerun its run.
rule all:
    default_target: True
    input:
        f"{R}/report.md",
        f"{R}/report.html",
        all_runs("{dir}/trace.parquet"),
        all_runs("{dir}/whatif/whatif.json"),
        detect_files(),

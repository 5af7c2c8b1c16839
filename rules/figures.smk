# The paper's figures, one rule per figure (figure_<NAME>), each building one figure
# (`stragglerlab figures --only NAME`) into results/figures/<NAME>.{png,pdf,json} from
# only what that figure reads (the module's INPUTS, see figures/registry.py): run
# records, what-if results, traces, for Fig. 14 the reference traces' what-if, and for
# the confusion matrices (fig_confusion) the scores of rule `score`, so it runs after it.
# A new or changed run rebuilds only the figures whose inputs it touches.
# A figure whose data the study lacks writes its "no data" image and the job succeeds
# (--allow-empty): the report lists it as such.

from stragglerlab.figures.registry import figure_inputs, figure_names

FIGURES = figure_names()


def _figure_files(kinds):
    """Input files of a figure that reads the given INPUT_KINDS."""
    files = {"record": all_runs("{dir}/run.json"), "meta": all_runs("{dir}/meta.yaml"),
             "faults": all_runs("{dir}/faults.json")}
    if "whatif" in kinds:
        files["whatif"] = all_runs("{dir}/whatif/whatif.json")
    if "traces" in kinds:
        files["traces"] = all_runs("{dir}/trace.parquet")
    if "reference" in kinds and REFERENCE_JOBS:
        files["reference"] = [f"{R}/reference/{j}/whatif.json" for j in REFERENCE_JOBS]
    if "scores" in kinds:
        files["scores"] = f"{R}/scores.json"
    return files


def figure_outputs(name):
    """The files figure `name` is declared to write (panels of Fig. 14 come beside them)."""
    return [f"{R}/figures/{name}.{ext}" for ext in ("png", "pdf", "json")]


for _name in FIGURES:
    _kinds = figure_inputs(_name)

    rule:
        name:
            f"figure_{_name}"
        input:
            **_figure_files(_kinds),
        output:
            figure_outputs(_name),
        log:
            f"{R}/logs/figures/{_name}.log",
        params:
            name=_name,
            runs=run_dirs(),
            reference=(["--reference", REFERENCE, "--reference-whatif", f"{R}/reference"]
                       if "reference" in _kinds and REFERENCE else []),
            scores=["--scores", f"{R}/scores.json"] if "scores" in _kinds else [],
            out=f"{R}/figures",
        shell:
            "{SL} figures --only {params.name:q} --runs {params.runs:q} "
            "{params.reference:q} {params.scores:q} --out {params.out:q} --allow-empty "
            "> {log:q} 2>&1"

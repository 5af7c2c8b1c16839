# The paper-vs-testbed report: results/report.md and the self-contained results/report.html,
# from every figure (one job each, rules/figures.smk), the scores and the runs.


rule report:
    input:
        figures=[f for name in FIGURES for f in figure_outputs(name)],
        scores=f"{R}/scores.json",
        whatif=all_runs("{dir}/whatif/whatif.json"),
    output:
        md=f"{R}/report.md",
        html=f"{R}/report.html",
    log:
        f"{R}/logs/report.log",
    params:
        figures=f"{R}/figures",
        runs=run_dirs(),
        out=R,
    shell:
        "{SL} report --figures {params.figures:q} --scores {input.scores:q} "
        "--runs {params.runs:q} --out {params.out:q} > {log:q} 2>&1"

# The paper-vs-testbed report: results/report.md and the self-contained results/report.html.


rule report:
    input:
        figures=f"{R}/figures",
        scores=f"{R}/scores.json",
        whatif=all_runs("{dir}/whatif/whatif.json"),
    output:
        md=f"{R}/report.md",
        html=f"{R}/report.html",
    log:
        f"{R}/logs/report.log",
    params:
        runs=run_dirs(),
    shell:
        "{SL} report --figures {input.figures} --scores {input.scores} --runs {params.runs} "
        "--out {R} > {log} 2>&1"

# The paper's figures from every run (and the artifact's reference traces): results/figures/.


rule figures:
    input:
        whatif=all_runs("{dir}/whatif/whatif.json"),
        traces=all_runs("{dir}/trace.parquet"),
        runs=all_runs("{dir}/run.json"),
        faults=all_runs("{dir}/faults.json"),
    output:
        directory(f"{R}/figures"),
    log:
        f"{R}/logs/figures.log",
    params:
        runs=run_dirs(),
        reference=f"--reference {shlex.quote(REFERENCE)}" if REFERENCE else "",
    shell:
        "{SL} figures --runs {params.runs} {params.reference} --out {output} > {log} 2>&1"

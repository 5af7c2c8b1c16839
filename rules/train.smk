# Training runs: results/<scenario>/<seed>/{trace.parquet, meta.yaml, faults.json, run.json}.
#
# The scenario entry (resolved by stragglerlab/workflow/population.py) is written to the
# run's scenario.yaml and passed as --config; it is also a param, so a changed
# entry reruns exactly that run. Training uses the whole machine (every rank
# gets its share of all cores), so nothing else runs beside it.
# --allow-failed-run: a run that fails by design (hang, crash) exits 0 when it
# failed cleanly and kept at least one complete step; run.json says `failed`.
# `ray_address` in the workflow config: every run attaches to that Ray cluster
# (`train --ray-address`), which the workflow never stops; unset, a private Ray.


rule train:
    output:
        trace=f"{R}/{{scenario}}/{{seed}}/trace.parquet",
        meta=f"{R}/{{scenario}}/{{seed}}/meta.yaml",
        faults=f"{R}/{{scenario}}/{{seed}}/faults.json",
        run=f"{R}/{{scenario}}/{{seed}}/run.json",
        scenario=f"{R}/{{scenario}}/{{seed}}/scenario.yaml",
    log:
        f"{R}/logs/train/{{scenario}}/{{seed}}.log",
    params:
        entry=scenario_entry,
        dir=lambda w: run_dir(w.scenario, w.seed),
        ray=f"--ray-address {shlex.quote(WF.ray_address)} " if WF.ray_address else "",
    threads: workflow.cores
    shell:
        "printf '%s' {params.entry:q} > {output.scenario:q} && "
        "{SL} train --scenario {wildcards.scenario:q} --config {output.scenario:q} "
        "--seed {wildcards.seed:q} {params.ray}--out {params.dir:q} --allow-failed-run > {log:q} 2>&1"

# What-if analysis, computed once per trace; everything downstream reads its whatif.json:
#   results/<scenario>/<seed>/whatif/whatif.json (+ artifact-format/) for every run,
#   results/reference/<job>/whatif.json for the artifact's reference traces (Fig. 14).


rule whatif:
    input:
        trace=f"{R}/{{scenario}}/{{seed}}/trace.parquet",
        meta=f"{R}/{{scenario}}/{{seed}}/meta.yaml",
    output:
        f"{R}/{{scenario}}/{{seed}}/whatif/whatif.json",
    log:
        f"{R}/logs/whatif/{{scenario}}/{{seed}}.log",
    params:
        out=lambda w: f"{run_dir(w.scenario, w.seed)}/whatif",
    shell:
        "{SL} whatif --trace {input.trace:q} --meta {input.meta:q} --out {params.out:q} "
        "> {log:q} 2>&1"


rule whatif_reference:
    input:
        trace=f"{REFERENCE}/trace-{{job}}.parquet",
        meta=f"{REFERENCE}/meta-{{job}}.yaml",
    output:
        f"{R}/reference/{{job}}/whatif.json",
    log:
        f"{R}/logs/whatif/reference/{{job}}.log",
    params:
        out=lambda w: f"{R}/reference/{w.job}",
    shell:
        "{SL} whatif --trace {input.trace:q} --meta {input.meta:q} --out {params.out:q} "
        "> {log:q} 2>&1"

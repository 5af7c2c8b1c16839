# What-if analysis of every run: results/<scenario>/<seed>/whatif/whatif.json (+ heatmap.png).


rule whatif:
    input:
        trace=f"{R}/{{scenario}}/{{seed}}/trace.parquet",
        meta=f"{R}/{{scenario}}/{{seed}}/meta.yaml",
    output:
        f"{R}/{{scenario}}/{{seed}}/whatif/whatif.json",
    log:
        f"{R}/logs/whatif/{{scenario}}/{{seed}}.log",
    params:
        dir=lambda w: f"{run_dir(w.scenario, w.seed)}/whatif",
    shell:
        "{SL} whatif --trace {input.trace} --meta {input.meta} --out {params.dir} > {log} 2>&1"

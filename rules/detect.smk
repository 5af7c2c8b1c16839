# Detectors on every run, offline and online:
# results/<scenario>/<seed>/detect/<detector>.json and <detector>-online.json.


def _run_files(wildcards):
    d = run_dir(wildcards.scenario, wildcards.seed)
    return {"trace": f"{d}/trace.parquet", "meta": f"{d}/meta.yaml", "run": f"{d}/run.json"}


rule detect:
    input:
        unpack(_run_files),
    output:
        f"{R}/{{scenario}}/{{seed}}/detect/{{detector}}.json",
    log:
        f"{R}/logs/detect/{{scenario}}/{{seed}}/{{detector}}.log",
    params:
        dir=lambda w: run_dir(w.scenario, w.seed),
    shell:
        "{SL} detect --run {params.dir} --detector {wildcards.detector} --out {output} "
        "> {log} 2>&1"


rule detect_online:
    input:
        unpack(_run_files),
    output:
        f"{R}/{{scenario}}/{{seed}}/detect/{{detector}}-online.json",
    log:
        f"{R}/logs/detect/{{scenario}}/{{seed}}/{{detector}}-online.log",
    params:
        dir=lambda w: run_dir(w.scenario, w.seed),
    shell:
        "{SL} detect --run {params.dir} --detector {wildcards.detector} --online "
        "--out {output} > {log} 2>&1"

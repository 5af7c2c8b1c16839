# Detectors on every run, one job per (run, detector, mode):
#   results/<scenario>/<seed>/detect/<detector>{mode}.json
# {mode} is the suffix of the CLI's fixed file name: "" offline, "-online" online
# (common.smk MODES). An offline detector that reads the what-if (the `whatif`
# detector, `reads_whatif`) depends on the run's whatif.json and never recomputes it.


def _detect_inputs(wildcards):
    d = run_dir(wildcards.scenario, wildcards.seed)
    files = {"trace": f"{d}/trace.parquet", "meta": f"{d}/meta.yaml", "run": f"{d}/run.json"}
    if wildcards.mode == MODES["offline"] and wildcards.detector in READS_WHATIF:
        files["whatif"] = f"{d}/whatif/whatif.json"
    return files


rule detect:
    input:
        unpack(_detect_inputs),
    output:
        f"{R}/{{scenario}}/{{seed}}/detect/{{detector}}{{mode}}.json",
    log:
        f"{R}/logs/detect/{{scenario}}/{{seed}}/{{detector}}{{mode}}.log",
    params:
        run=lambda w: run_dir(w.scenario, w.seed),
        out=lambda w: f"{run_dir(w.scenario, w.seed)}/detect",
        online=lambda w: "--online" if w.mode == MODES["online"] else "",
        settings=lambda w: WF.set_flags(w.detector),
    shell:
        "{SL} detect --run {params.run:q} --detector {wildcards.detector:q} {params.online} "
        "{params.settings:q} --out {params.out:q} > {log:q} 2>&1"

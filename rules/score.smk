# Detector scores against ground truth over every run: results/scores.json.


rule score:
    input:
        detect=[f"{d}/detect/{n}.json" for d in run_dirs() for n in detect_names()],
        faults=all_runs("{dir}/faults.json"),
        runs=all_runs("{dir}/run.json"),
    output:
        f"{R}/scores.json",
    log:
        f"{R}/logs/score.log",
    params:
        runs=run_dirs(),
        # `all` = every registered detector; a subset is passed by name.
        detectors="all" if set(WF.detectors) == set(_known_detectors()) else " ".join(
            WF.detectors),
    shell:
        "{SL} score --runs {params.runs} --detector {params.detectors} --out {output} "
        "> {log} 2>&1"

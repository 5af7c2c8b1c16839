# Detector scores against ground truth over every run: results/scores.json.
# score only reads the findings the detect jobs wrote (it never runs a detector);
# without online replays (`online: false`) it is told so with --offline-only.


rule score:
    input:
        detect=detect_files(),
        faults=all_runs("{dir}/faults.json"),
        runs=all_runs("{dir}/run.json"),
    output:
        f"{R}/scores.json",
    log:
        f"{R}/logs/score.log",
    params:
        runs=run_dirs(),
        # `all` = every registered detector; a subset is passed by name.
        detectors=["all"] if set(WF.detectors) == set(_known_detectors()) else list(WF.detectors),
        offline_only="" if WF.online else "--offline-only",
        out=R,
    shell:
        "{SL} score --runs {params.runs:q} --detector {params.detectors:q} "
        "{params.offline_only} --out {params.out:q} > {log:q} 2>&1"

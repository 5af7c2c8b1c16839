#!/usr/bin/env bash
# The shared-link split: faults that every member of a group waits on (a pure-DP ring's
# links, one and two throttled; a ring of two; a pure PP 2 job's only link) beside clean
# runs of the same layouts, each trained at the given seeds (Ray launcher, tc on the
# ranks' namespaces), analysed by the what-if, diagnosed by `whatif` offline and online,
# then scored (`stragglerlab score`, per run and per fault, online latency included).
#
#   benchmarks/shared_links.sh OUT SEEDS...     # e.g. results/shared-links 400 401 402
#   SHARED_LINKS_PHASE=train|score              # only train (+ whatif, detect), or only score
#
# A run folder already diagnosed (detect/whatif.json) is kept, so a stopped split resumes.
set -u
out=${1:?usage: shared_links.sh OUT SEEDS...}
shift
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || { echo "shared_links.sh: give the seeds" >&2; exit 2; }
scenarios=(shared-ring-dp4 shared-ring-dp4-two shared-ring-dp2 shared-link-pp2
           clean-dp2-pp1 clean-dp4-pp1 clean-dp1-pp2)
py=${PYTHON:-python}
phase=${SHARED_LINKS_PHASE:-all}
mkdir -p "$out"
if [ "$phase" != score ]; then
  for seed in "${seeds[@]}"; do
    for sc in "${scenarios[@]}"; do
      dir="$out/$sc/$seed"
      [ -f "$dir/detect/whatif.json" ] && continue
      echo "$(date -u +%H:%M:%S) $sc $seed (load $(cut -d' ' -f1 /proc/loadavg))"
      { [ -f "$dir/run.json" ] || "$py" -m stragglerlab train --scenario "$sc" --seed "$seed" \
          --out "$dir" --quiet; } \
        && "$py" -m stragglerlab whatif --run "$dir" --quiet > /dev/null \
        && "$py" -m stragglerlab detect --run "$dir" --detector whatif --online \
             --out "$dir/detect" --quiet > /dev/null \
        && "$py" -m stragglerlab detect --run "$dir" --detector whatif --out "$dir/detect" \
             --quiet > /dev/null \
        || echo "$(date -u +%H:%M:%S) FAILED $sc $seed"
    done
  done
fi
if [ "$phase" != train ]; then
  runs=()
  for sc in "${scenarios[@]}"; do
    for seed in "${seeds[@]}"; do
      [ -f "$out/$sc/$seed/detect/whatif.json" ] && runs+=("$out/$sc/$seed")
    done
  done
  "$py" -m stragglerlab score --runs "${runs[@]}" --detector whatif --out "$out"
fi

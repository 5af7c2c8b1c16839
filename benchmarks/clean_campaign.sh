#!/usr/bin/env bash
# The clean-run campaign: fresh clean runs of six layouts, each trained serially with the
# local launcher at low priority, analysed by the what-if, then every run's findings of the
# detector as it ships (`detect --detectors whatif`'s detector, regime changes included)
# offline and in the online replay, per 1,000 clean worker-steps
# (benchmarks/over_time_noise.py --online).
#
#   benchmarks/clean_campaign.sh OUT [SEEDS...]    # default seeds 701-705; OUT e.g. results/clean-campaign
#   CLEAN_CAMPAIGN_PHASE=train|score               # only train (+ whatif), or only score
#
# A run folder already complete (whatif/whatif.json) is kept, so a stopped campaign resumes.
set -u
out=${1:?usage: clean_campaign.sh OUT [SEEDS...]}
shift
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(701 702 703 704 705)
layouts=(clean-dp2-pp1 clean-dp4-pp1 clean-dp1-pp2 clean-dp1-pp4 clean-dp2-pp2 clean-dp2-pp4)
py=${PYTHON:-python}
phase=${CLEAN_CAMPAIGN_PHASE:-all}
steps=${CLEAN_CAMPAIGN_STEPS:-12}
mkdir -p "$out"
if [ "$phase" != score ]; then
  for seed in "${seeds[@]}"; do
    for sc in "${layouts[@]}"; do
      dir="$out/$sc/$seed"
      [ -f "$dir/whatif/whatif.json" ] && continue
      echo "$(date -u +%H:%M:%S) train $sc $seed (load $(cut -d' ' -f1 /proc/loadavg))"
      nice -n 10 "$py" -m stragglerlab train --launcher local --scenario "$sc" --seed "$seed" \
        --steps "$steps" --out "$dir" --overwrite --quiet \
        && nice -n 10 "$py" -m stragglerlab whatif --run "$dir" > "$dir/whatif.log" 2>&1 \
        || echo "$(date -u +%H:%M:%S) FAILED $sc $seed"
    done
  done
fi
if [ "$phase" != train ]; then
  runs=()
  for sc in "${layouts[@]}"; do
    for seed in "${seeds[@]}"; do
      [ -f "$out/$sc/$seed/whatif/whatif.json" ] && runs+=("$out/$sc/$seed")
    done
  done
  nice -n 10 "$py" benchmarks/over_time_noise.py --online --runs "${runs[@]}" \
    --json "$out/clean-campaign.json"
fi

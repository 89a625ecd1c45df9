#!/usr/bin/env bash
# The GPU check of issue 41 on a bare GPU machine: install the harness without touching its torch, then run
# `harness bench device` (correctness, transfer, head, train: at most 4 minutes on one H100) and leave
# device.md + device.json (+ the console log) in $OUT, or in results/bench/ when $OUT is unset.
#
# The machine has Python 3.12 (python3, or $PYTHON) with torch + CUDA, torchvision, timm, accelerate, scikit-learn, scipy, safetensors,
# huggingface_hub, click, pyyaml, tqdm, filelock, matplotlib, tensorboard and pytest, and no package registry.
# What the harness needs beyond that (omegaconf; webdataset and braceexpand for the loader part; setuptools only if
# the machine's is too old for an editable install) comes from wheels/device/ (git-ignored), filled beforehand on a
# machine with the registry:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d wheels/device omegaconf webdataset braceexpand setuptools
#
# Usage: tools/device-check.sh [--dry-run | --full | any other `harness bench device` option]
#   DEVICE_CHECK_TIMEOUT (seconds, default 540) stops the bench short of a 10-minute command limit; the files
#   are rewritten after each part, so a run cut short still leaves what it measured.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=wheels/device
DEST=${OUT:-results/bench}
if [[ " $* " == *" --dry-run "* ]] && [ -z "${OUT:-}" ]; then DEST=$(mktemp -d); fi  # a dry run never overwrites
mkdir -p "$DEST"
LOG="$DEST/device-check.log"
exec > >(tee "$LOG") 2>&1
echo "[device-check] $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname); $($PY --version)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# 1. install: what the machine lacks from wheels/device (omegaconf; webdataset for the loader part's shards; setuptools
#    only if the machine's is too old for an editable install), then the project itself with --no-deps
need=()
$PY -c 'import omegaconf' 2>/dev/null || need+=(omegaconf)
$PY -c 'import webdataset' 2>/dev/null || need+=(webdataset)
$PY -c 'import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split(".")[:2])) < (70, 1))' 2>/dev/null ||
  need+=('setuptools>=70.1')
if ((${#need[@]})); then
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "[device-check] ${need[*]} missing and no wheels in $WHEELS: fill it on a machine with the registry (see the top of $0)" >&2
    exit 2
  fi
  $PY -m pip install -q --no-index --find-links "$WHEELS" "${need[@]}"
fi
$PY -m pip install --no-index --no-deps --no-build-isolation -e . >/dev/null
$PY -c 'import torch, harness.cli; print(f"[device-check] torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {torch.cuda.is_available()}")'

# 2. the check (CUBLAS_WORKSPACE_CONFIG: deterministic cuBLAS for the correctness part; no hub: nothing is reachable)
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
status=0
PACK=()  # the loader part's CIFAR-10 shards, packed beforehand into the carried folder (docs/development.md)
if [ -d "$WHEELS/cifar10-pack/train" ]; then PACK=(--pack "$WHEELS/cifar10-pack"); fi
timeout "${DEVICE_CHECK_TIMEOUT:-540}" $PY -m harness.cli bench device --out "$DEST" "${PACK[@]}" "$@" || status=$?

# 3. the results beside the committed ones too, when they were written elsewhere ($OUT: the device tool collects it)
if [ "$DEST" != results/bench ] && [ -f "$DEST/device.md" ] && [[ " $* " != *" --dry-run "* ]]; then
  mkdir -p results/bench && cp "$DEST/device.md" "$DEST/device.json" results/bench/
fi
echo "[device-check] exit status $status; files: $(ls "$DEST" | tr '\n' ' ')"
exit "$status"

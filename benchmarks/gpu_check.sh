#!/usr/bin/env bash
# One call on a machine with one NVIDIA GPU: throughput, then correctness.
#
#   bash benchmarks/gpu_check.sh [--steps=10]
#
# 1. benchmarks/bench_training.py --device=gpu for ALBERT-base and ALBERT-large at seq 512,
#    global batch 32: ours (default strategy, XLA, bf16) against HF transformers (CUDA, bf16
#    autocast) and keras-hub (bf16, XLA), seq/s and model FLOPs utilisation against the card's
#    bf16 peak (H100/H200 SXM: 989 TFLOP/s dense).
# 2. benchmarks/gpu_loss_check.py: 200 steps of run_pretraining on the tiny config with XLA and
#    bf16 on the GPU; the loss must fall and the first steps match float32 on the CPU.
#
# Packages: when one is missing, pip installs TensorFlow with CUDA (tensorflow[and-cuda], in
# requirements.txt's range), the runtime packages, keras-hub, transformers and torch (the
# default CUDA build there); on a machine without the
# registries, wheels put in .whl/ are installed instead. Exit status: 0 when every part ran
# and the loss check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
python=${PYTHON:-python3}
steps=${1:---steps=10}

if compgen -G ".whl/*.whl" >/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
elif ! "$python" -c "import tensorflow, keras_hub, transformers, torch" 2>/dev/null; then
  tf_range=$(sed -n 's/^tensorflow\([<>=!].*\)/\1/p' requirements.txt)
  "$python" -m pip install -q "tensorflow[and-cuda]${tf_range}" "tensorflow-text${tf_range}" \
    sentencepiece absl-py safetensors keras-hub transformers torch
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || exit 1

status=0
for config in albert_base_v2 albert_large_v2; do
  timeout 170 "$python" benchmarks/bench_training.py --device=gpu \
    --config="albert/configs/${config}.json" --seq=512 --batch=32 "$steps" \
    --settle_seconds=0.2 --row_timeout=150 || status=1
done
timeout 200 "$python" benchmarks/gpu_loss_check.py --steps=200 || status=1
exit $status

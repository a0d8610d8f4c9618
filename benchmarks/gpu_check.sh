#!/usr/bin/env bash
# One call on a machine with one NVIDIA GPU: correctness, then throughput.
#
#   bash benchmarks/gpu_check.sh [--steps=10]
#
# 1. benchmarks/gpu_loss_check.py: 200 steps of our pretraining step on the tiny config with
#    XLA and bf16 on the GPU; the loss must fall and the first steps match float32 on the CPU
#    (the same backend there, and TensorFlow's Trainer through gpu_reference_losses.json).
#    It runs beside the ALBERT-base rows' builds (mostly compiling: a second of GPU work),
#    and the benchmark's timed turns wait for it to end (--turns_after_file).
# 2. benchmarks/bench_training.py --device=gpu for ALBERT-base and ALBERT-large at seq 512,
#    global batch 32: ours (bf16, XLA) against HF transformers (CUDA, bf16 autocast) and
#    keras-hub (bf16, XLA), seq/s and model FLOPs utilisation against the card's bf16 peak
#    (H100/H200 SXM: 989 TFLOP/s dense). The rows start at once, compile and warm up one at a
#    time (XLA autotunes on a quiet card), then take turns (a row out of memory beside the
#    others runs again alone). With GPU_CHECK_PROFILE=1, two steps of each JAX row of
#    ALBERT-base are then traced (benchmarks/device_profile.py) and summarised by kind of op,
#    and each row's trace and optimized HLO of its step are kept in $OUT/gpu_profile, one .gz
#    file each (within the same budget: the turns come first).
# The script keeps within GPU_CHECK_SECONDS (default 225): each benchmark gets an equal share
# of what is left when it starts (7/8 of it as its deadline: it stops taking turns, or reports
# a row still building as timed out, rather than overrun it); the loss check gets half the
# budget (it ran in 71 s on an H100).
#
# Our rows run under TensorFlow when it sees the GPU, else under Keras' JAX backend (the lent
# GPU machines hold JAX and PyTorch with CUDA but no TensorFlow, and reach no registry).
# Packages: wheels put in .whl/ are installed first (keras, keras-hub and their small
# dependencies; see the README); on a machine with the registries and nothing installed, pip
# installs TensorFlow with CUDA instead. Exit status: 0 when the loss check passed and every
# benchmark row has a figure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 XLA_PYTHON_CLIENT_PREALLOCATE=false
python=${PYTHON:-python3}
steps=${1:---steps=10}
# The whole call, installs included, must end within 4 minutes on an H100 (one device call).
budget=${GPU_CHECK_SECONDS:-225}

if compgen -G ".whl/*.whl" >/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
elif ! "$python" -c "import keras, keras_hub, transformers, torch" 2>/dev/null; then
  tf_range=$(sed -n 's/^tensorflow\([<>=!].*\)/\1/p' requirements.txt)
  "$python" -m pip install -q "tensorflow[and-cuda]${tf_range}" "tensorflow-text${tf_range}" \
    sentencepiece absl-py safetensors keras-hub transformers torch
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || exit 1
if ! "$python" -c "import tensorflow as tf; assert tf.config.list_physical_devices('GPU')" \
    2>/dev/null; then
  export KERAS_BACKEND=jax
fi
"$python" -c "import keras, jax; print('keras', keras.__version__, keras.backend.backend(),
'jax', jax.__version__, jax.devices())" 2>&1 | tail -1

status=0
work=$(mktemp -d)
loss_done="${work}/loss_check.status"
# The loss check, in the background: its output is printed once it has ended, after the
# ALBERT-base benchmark.
(
  timeout $((budget / 2)) "$python" benchmarks/gpu_loss_check.py --steps=200 \
    >"${work}/loss_check.log" 2>&1
  echo $? >"${loss_done}"
) &
loss_check=$!
report_loss_check() {
  [ -n "$loss_check" ] || return 0
  wait "$loss_check"
  loss_check=""
  echo "gpu_check: the loss check (beside the ALBERT-base builds):"
  cat "${work}/loss_check.log"
  [ "$(cat "${loss_done}" 2>/dev/null)" = 0 ] || status=1
}
configs=(albert_base_v2 albert_large_v2)
for index in "${!configs[@]}"; do
  config=${configs[$index]}
  share=$(( (budget - SECONDS) / (${#configs[@]} - index) ))
  if [ "$share" -lt 5 ]; then
    echo "gpu_check: ${config} skipped, ${share} s left for it"
    status=1
    continue
  fi
  profile=()
  [ "$index" = 0 ] && [ "${GPU_CHECK_PROFILE:-0}" = 1 ] && profile=(--profile_dir="${work}/${config}")
  timeout "$share" "$python" benchmarks/bench_training.py --device=gpu \
    --config="albert/configs/${config}.json" --seq=512 --batch=32 "$steps" \
    --settle_seconds=0.2 --deadline_seconds=$((share - share / 8)) \
    --turns_after_file="${loss_done}" "${profile[@]}" || status=1
  echo "gpu_check: ${config} done at ${SECONDS} s"
  # Only files one folder down come back from a device call: the .gz files, not the folders.
  if [ "${#profile[@]}" -gt 0 ] && [ -n "${OUT:-}" ] \
      && compgen -G "${work}/${config}/*.gz" >/dev/null; then
    mkdir -p "${OUT}/gpu_profile" && cp "${work}/${config}"/*.gz "${OUT}/gpu_profile/"
    echo "gpu_check: kept $(ls "${OUT}/gpu_profile" | tr '\n' ' ')in \$OUT/gpu_profile"
  fi
  [ "$index" = 0 ] && report_loss_check
done
report_loss_check
echo "gpu_check: ${SECONDS} s in all (budget ${budget} s)"
exit $status

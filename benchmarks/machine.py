"""What the benchmark machine is, and what a training step is worth: the CPU's model and bf16
flags, the GPU's name and bf16 peak, a step's model FLOPs and the utilisation they make."""

import subprocess


def model_flops(config, batch, seq, predictions):
    """Matmul FLOPs of one training step of the whole model, forward + backward (3 x forward):
    every position through every layer, the MLM head at `predictions` positions per sequence.
    The numerator of model FLOPs utilisation, the same for every implementation (ours skips
    part of the last layer, see profile_training.training_flops, and is not credited for it)."""
    h, i = config["hidden_size"], config["intermediate_size"]
    e, v = config["embedding_size"], config["vocab_size"]
    layer = 2 * seq * (4 * h * h + 2 * h * i) + 2 * 2 * seq * seq * h
    forward = 2 * seq * e * h + config["num_hidden_layers"] * layer
    forward += 2 * predictions * (h * e + e * v) + 2 * h * h  # MLM head, pooler
    return 3 * batch * forward


# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) by the name nvidia-smi reports.
GPU_BF16_PEAK_TFLOPS = (
    ("H200", 989),
    ("H100", 989),
    ("A100", 312),
    ("L40S", 362),
    ("L4", 121),
    ("A10G", 70),
    ("A10", 125),
    ("B200", 2250),
)


def gpu_name():
    """The first GPU's name from nvidia-smi (without starting CUDA here), or None."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else None


def peak_tflops(name):
    """The bf16 dense peak of a GPU named `name`, or None when the card is not in the table."""
    for key, peak in GPU_BF16_PEAK_TFLOPS:
        if name and key in name:
            return peak
    return None


def mfu_percent(flops, rate, batch, peak):
    """Model FLOPs utilisation as text: `flops` per step at `rate` sequences/s of `batch`."""
    if not peak:
        return "n/a"
    return f"{100 * flops * rate / batch / (peak * 1e12):.1f}%"


def cpu_model():
    """The CPU's model name and its bfloat16 flags, from /proc/cpuinfo (Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return "unknown"

    def field(name, default):
        return next(
            (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(name)),
            default,
        )

    family, number = field("cpu family", "?"), field("model\t", "?")
    model = f"{field('model name', 'unknown')} (family {family} model {number})"
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    bf16 = sorted(set(flags) & {"avx512_bf16", "amx_bf16", "amx_tile"})
    return f"{model}; bf16 flags: {', '.join(bf16) or 'none'}"


def gpu_peak_mib():
    """Peak GPU memory this process's framework allocated (MiB), or None off a GPU: JAX's
    `peak_bytes_in_use`, PyTorch's `max_memory_allocated`, TensorFlow's `get_memory_info`
    peak, for whichever of them the process has imported and placed on a GPU."""
    import sys

    peaks = []
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        for device in jax.devices():
            stats = device.platform == "gpu" and device.memory_stats()
            if stats and "peak_bytes_in_use" in stats:
                peaks.append(stats["peak_bytes_in_use"])
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            peaks.append(torch.cuda.max_memory_allocated())
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        for index, _ in enumerate(tf.config.list_logical_devices("GPU")):
            peaks.append(tf.config.experimental.get_memory_info(f"GPU:{index}")["peak"])
    return max(peaks) / 2**20 if peaks else None

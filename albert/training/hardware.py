"""The `auto` precision and XLA setting: the fastest path on the device a run lands on.

    TPU                          bfloat16, XLA  (matrix units are bfloat16; TPUs always compile)
    GPU, compute capability >= 8 bfloat16, XLA  (Ampere and later: bfloat16 tensor cores)
    GPU, older                   float16,  XLA  (float16 tensor cores; dynamic loss scaling)
    CPU with bf16 matrix units   bfloat16, no XLA  (avx512_bf16 / amx_bf16: TF's oneDNN kernels
                                 use them; XLA:CPU's bfloat16 dots are slower than its float32)
    CPU without                  float32,  XLA  (XLA's fused elementwise ops and its dots are the
                                 fastest float32 path measured)

An explicit `--mixed_precision` or `--jit_compile` wins over its half of the table; the other
half is then chosen for the precision given (e.g. `--mixed_precision=none` on a bf16 CPU runs
float32 with XLA). XLA on CPU stays off under several replicas (MirroredStrategy over logical
CPUs fails to place the compiled step). `choose` is a pure function of a `DeviceDescription`;
`describe_machine` reads the real one.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from albert.errors import AlbertError

# /proc/cpuinfo flags of matrix units that run bfloat16 products natively.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "amx")
# Overrides /proc/cpuinfo's flags (space-separated; "" for none), e.g. to reproduce another
# machine's `auto` choice, or to keep a test suite's path the same on every CPU.
CPU_FLAGS_VARIABLE = "ALBERT_CPU_FLAGS"
# "0" keeps XLA off where `auto` would compile on a CPU. For test suites: a run of a few steps
# of a tiny model spends about half its time compiling with XLA:CPU, which a long run recoups.
CPU_XLA_VARIABLE = "ALBERT_CPU_XLA"
AUTO = "auto"


class PrecisionError(AlbertError):
    """A `--mixed_precision` the device cannot run."""


@dataclasses.dataclass(frozen=True)
class DeviceDescription:
    """What the `auto` choice looks at.

    Attributes:
        kind: "cpu", "gpu" or "tpu": where the model's matrix products run.
        cpu_flags: the CPU's feature flags (as /proc/cpuinfo lists them); read on CPU only.
        compute_capability: (major, minor) of the GPU, or None when unknown or not a GPU.
        replicas: local devices the strategy spreads one step over.
        cpu_xla: whether `auto` may compile with XLA on this CPU (False: $ALBERT_CPU_XLA=0).
    """

    kind: str
    cpu_flags: frozenset = frozenset()
    compute_capability: tuple | None = None
    replicas: int = 1
    cpu_xla: bool = True

    @property
    def bf16_cpu_flags(self):
        return sorted(set(BF16_CPU_FLAGS) & set(self.cpu_flags))


@dataclasses.dataclass(frozen=True)
class Choice:
    """The precision ("none", "bfloat16" or "float16"), XLA on/off, and why, in one line."""

    precision: str
    jit_compile: bool
    reason: str

    def describe(self):
        xla = "XLA on" if self.jit_compile else "XLA off"
        return f"precision {self.precision}, {xla} ({self.reason})"


def _auto_precision(device):
    if device.kind == "tpu":
        return "bfloat16", "TPU: bfloat16 matrix units"
    if device.kind == "gpu":
        capability = device.compute_capability
        if capability is None or tuple(capability) >= (8, 0):
            return "bfloat16", f"GPU{_capability(capability)}: bfloat16 tensor cores"
        return "float16", f"GPU{_capability(capability)}: float16 tensor cores, no bfloat16"
    if device.bf16_cpu_flags:
        return "bfloat16", f"CPU with bfloat16 matrix units ({', '.join(device.bf16_cpu_flags)})"
    return "none", "CPU without bfloat16 matrix units (no avx512_bf16/amx_bf16)"


def _capability(capability):
    return "" if capability is None else " sm_{}{}".format(*capability)


def _auto_jit(device, precision):
    if device.kind in ("tpu", "gpu"):
        return True, "XLA fuses the step on accelerators"
    if device.replicas > 1:
        return False, (
            "XLA:CPU is not used under several replicas or across workers (it fails to place them)"
        )
    if not device.cpu_xla:
        return False, f"${CPU_XLA_VARIABLE}=0"
    if precision == "bfloat16" and device.bf16_cpu_flags:
        return False, "XLA:CPU's bfloat16 matmuls are slower than TF's oneDNN kernels"
    return True, "XLA:CPU fuses the float32 step"


def choose(device, mixed_precision=AUTO, jit_compile=None):
    """The precision and XLA setting for `device`, `auto` resolved.

    Args:
        device: a `DeviceDescription`.
        mixed_precision: `--mixed_precision`: "auto" (or None) to choose, or an explicit
            "none", "bfloat16" or "float16".
        jit_compile: `--jit_compile`: None to choose, or an explicit bool.

    Returns:
        A `Choice`; its reason names what was chosen automatically and why.

    Raises:
        PrecisionError: float16 asked for on a TPU.

    Example:
        >>> choose(DeviceDescription("cpu", frozenset({"avx2", "avx512_bf16"}))).describe()
        'precision bfloat16, XLA off (auto precision: CPU with bfloat16 matrix units
        (avx512_bf16); auto XLA: XLA:CPU's bfloat16 matmuls are slower than TF's oneDNN kernels)'
    """
    precision = mixed_precision
    if precision in (None, AUTO):
        precision, why = _auto_precision(device)
        reasons = [f"auto precision: {why}"]
    elif precision == "float16" and device.kind == "tpu":
        # TPU matrix units take bfloat16; float16 would run emulated, with loss scaling that
        # the original's TPU runs never needed.
        raise PrecisionError(
            "--mixed_precision=float16 on a TPU: TPUs compute in bfloat16; pass "
            "--mixed_precision=bfloat16 (or auto)."
        )
    else:
        reasons = ["--mixed_precision given"]
    if jit_compile is None:
        jit_compile, why = _auto_jit(device, precision)
        reasons.append(f"auto XLA: {why}")
    else:
        reasons.append("--jit_compile given")
    return Choice(precision, bool(jit_compile), "; ".join(reasons))


def read_cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The CPU's feature flags: $ALBERT_CPU_FLAGS when set, else /proc/cpuinfo's (Linux);
    none elsewhere (other systems are assumed to have no bfloat16 units)."""
    if CPU_FLAGS_VARIABLE in os.environ:
        return frozenset(os.environ[CPU_FLAGS_VARIABLE].split())
    if not sys.platform.startswith("linux") or not os.path.exists(cpuinfo):
        return frozenset()
    with open(cpuinfo) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                return frozenset(value.split())
    return frozenset()


def describe_machine(strategy_name):
    """The `DeviceDescription` of this machine for a run under `strategy_name`.

    Reads the device list without creating TensorFlow's runtime, so it may run before
    MultiWorkerMirroredStrategy is built.
    """
    import tensorflow as tf

    if strategy_name == "tpu":
        return DeviceDescription("tpu")
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        replicas = len(gpus) if strategy_name == "mirrored" else 1
        return DeviceDescription("gpu", frozenset(), details.get("compute_capability"), replicas)
    replicas = 1
    if strategy_name == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        replicas = len(tf.config.get_logical_device_configuration(cpu) or [cpu])
    elif strategy_name == "multi_worker":
        replicas = 2  # collectives across workers: treat as several replicas
    cpu_xla = os.environ.get(CPU_XLA_VARIABLE, "1") != "0"
    return DeviceDescription("cpu", read_cpu_flags(), None, replicas, cpu_xla)

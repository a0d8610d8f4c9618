"""The `auto` precision / XLA choice (albert.training.hardware) and the flags that reach it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic_pretraining as synthetic
from absl import flags

from albert.errors import AlbertError
from albert.training import flags as flags_lib
from albert.training import hardware
from albert.training.hardware import DeviceDescription, choose

REPO = Path(__file__).resolve().parents[2]
ZEN3 = frozenset({"fpu", "sse2", "avx", "avx2", "fma"})
ZEN5 = ZEN3 | {"avx512f", "avx512_bf16", "avx512_vnni"}
SAPPHIRE_RAPIDS = ZEN3 | {"avx512f", "amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.parametrize(
    "device, precision, jit",
    [
        (DeviceDescription("tpu"), "bfloat16", True),
        (DeviceDescription("gpu", compute_capability=(9, 0)), "bfloat16", True),
        (DeviceDescription("gpu", compute_capability=(8, 0), replicas=8), "bfloat16", True),
        (DeviceDescription("gpu", compute_capability=(7, 0)), "float16", True),
        (DeviceDescription("cpu", ZEN5), "bfloat16", False),
        (DeviceDescription("cpu", SAPPHIRE_RAPIDS), "bfloat16", False),
        (DeviceDescription("cpu", ZEN3), "none", True),
        (DeviceDescription("cpu", frozenset()), "none", True),
        # MirroredStrategy over logical CPUs cannot place an XLA step.
        (DeviceDescription("cpu", ZEN3, replicas=2), "none", False),
    ],
)
def test_auto_picks_the_path_of_each_device(device, precision, jit):
    choice = choose(device)
    assert (choice.precision, choice.jit_compile) == (precision, jit)
    assert "auto precision:" in choice.reason and "auto XLA:" in choice.reason


def test_the_reason_names_the_bf16_units():
    assert "(avx512_bf16)" in choose(DeviceDescription("cpu", ZEN5)).describe()
    assert "(amx_bf16)" in choose(DeviceDescription("cpu", SAPPHIRE_RAPIDS)).describe()
    assert "sm_70" in choose(DeviceDescription("gpu", compute_capability=(7, 0))).reason


def test_explicit_flags_win_and_the_other_half_follows_them():
    zen5, zen3 = DeviceDescription("cpu", ZEN5), DeviceDescription("cpu", ZEN3)
    both = choose(zen5, "float16", True)
    assert (both.precision, both.jit_compile) == ("float16", True)
    assert both.reason == "--mixed_precision given; --jit_compile given"
    # float32 on a bf16 CPU: XLA is the faster float32 path there too.
    assert (choose(zen5, "none").precision, choose(zen5, "none").jit_compile) == ("none", True)
    # bfloat16 on a CPU without bf16 units: nothing runs it natively, XLA stays the default.
    assert choose(zen3, "bfloat16").jit_compile
    assert choose(zen3, jit_compile=False) == hardware.Choice(
        "none",
        False,
        "auto precision: CPU without bfloat16 matrix units "
        "(no avx512_bf16/amx_bf16); --jit_compile given",
    )
    assert choose(DeviceDescription("tpu"), "none").precision == "none"


def test_cpu_flags_come_from_cpuinfo_or_the_variable(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n"
    )
    monkeypatch.delenv(hardware.CPU_FLAGS_VARIABLE, raising=False)
    if sys.platform.startswith("linux"):
        assert hardware.read_cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512_bf16"}
    assert hardware.read_cpu_flags(str(tmp_path / "missing")) == frozenset()
    monkeypatch.setenv(hardware.CPU_FLAGS_VARIABLE, "avx2 amx_bf16")
    assert hardware.read_cpu_flags(str(cpuinfo)) == {"avx2", "amx_bf16"}
    monkeypatch.setenv(hardware.CPU_FLAGS_VARIABLE, "")
    assert hardware.read_cpu_flags(str(cpuinfo)) == frozenset()


def test_this_machine_is_described_as_a_cpu(monkeypatch):
    monkeypatch.setenv(hardware.CPU_FLAGS_VARIABLE, "avx2 avx512_bf16")
    monkeypatch.delenv(hardware.CPU_XLA_VARIABLE, raising=False)
    device = hardware.describe_machine("default")
    assert device == DeviceDescription("cpu", frozenset({"avx2", "avx512_bf16"}))
    assert hardware.describe_machine("tpu").kind == "tpu"
    assert hardware.describe_machine("multi_worker").replicas > 1


def test_no_precision_given_is_auto():
    for device in (DeviceDescription("cpu", ZEN5), DeviceDescription("gpu")):
        assert choose(device, None) == choose(device, "auto") == choose(device)


def test_gpus_are_counted_as_replicas_under_mirrored_only(monkeypatch):
    import tensorflow as tf

    gpus = ["GPU:0", "GPU:1"]
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpus)
    details = {"compute_capability": (8, 0)}
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda gpu: details)
    mirrored = hardware.describe_machine("mirrored")
    assert (mirrored.kind, mirrored.compute_capability, mirrored.replicas) == ("gpu", (8, 0), 2)
    assert hardware.describe_machine("default").replicas == 1


def test_the_cpu_xla_variable_keeps_auto_xla_off_on_a_cpu_only(monkeypatch):
    # The test suite sets it: a few steps of a tiny model spend half their time compiling.
    monkeypatch.setenv(hardware.CPU_FLAGS_VARIABLE, "avx2")
    monkeypatch.setenv(hardware.CPU_XLA_VARIABLE, "0")
    device = hardware.describe_machine("default")
    assert not device.cpu_xla
    assert choose(device) == hardware.Choice(
        "none",
        False,
        "auto precision: CPU without bfloat16 matrix units (no avx512_bf16/amx_bf16); "
        "auto XLA: $ALBERT_CPU_XLA=0",
    )
    assert choose(device, jit_compile=True).jit_compile  # the flag still wins
    assert choose(DeviceDescription("tpu", cpu_xla=False)).jit_compile
    assert choose(DeviceDescription("gpu", cpu_xla=False)).jit_compile
    assert not flags_lib.run_options_from_flags(_parsed("--do_train")).jit_compile
    monkeypatch.setenv(hardware.CPU_XLA_VARIABLE, "1")
    assert hardware.describe_machine("default").cpu_xla
    assert flags_lib.run_options_from_flags(_parsed("--do_train")).jit_compile


def _parsed(*args):
    flag_values = flags.FlagValues()
    flags_lib.define_pretraining_flags(flag_values)
    flag_values(["run_pretraining.py", *args])
    return flag_values


@pytest.mark.parametrize(
    "args, jit_compile",
    [
        ((), None),
        (("--jit_compile=auto",), None),
        (("--jit_compile",), True),
        (("--nojit_compile",), False),
        (("--jit_compile=false",), False),
    ],
)
def test_jit_compile_flag_takes_auto_and_booleans(args, jit_compile):
    flag_values = _parsed(*args)
    assert flag_values.jit_compile is jit_compile
    assert flag_values.mixed_precision == "auto"


def test_run_options_take_the_auto_xla_choice(monkeypatch):
    monkeypatch.delenv(hardware.CPU_XLA_VARIABLE, raising=False)
    monkeypatch.setenv(hardware.CPU_FLAGS_VARIABLE, "avx2")
    assert flags_lib.run_options_from_flags(_parsed("--do_train")).jit_compile
    monkeypatch.setenv(hardware.CPU_FLAGS_VARIABLE, "avx2 avx512_bf16")
    assert not flags_lib.run_options_from_flags(_parsed("--do_train")).jit_compile
    options = flags_lib.run_options_from_flags(_parsed("--do_train", "--jit_compile"))
    assert options.jit_compile


@pytest.mark.slow
def test_run_pretraining_without_precision_flags_logs_its_choice(tmp_path):
    train = synthetic.write_records(tmp_path / "train.tfrecord", 8, seed=1)
    config = synthetic.write_config(tmp_path / "config.json")
    command = [
        sys.executable,
        str(REPO / "run_pretraining.py"),
        "--do_train",
        f"--albert_config_file={config}",
        f"--input_file={train}",
        f"--output_dir={tmp_path}/out",
        "--train_batch_size=4",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--num_train_steps=1",
        "--num_warmup_steps=0",
    ]
    # A Zen 5's flags, on whatever CPU runs the test.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    env[hardware.CPU_FLAGS_VARIABLE] = "avx2 avx512_bf16"
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert process.returncode == 0, process.stderr[-3000:]
    line = next(line for line in process.stderr.splitlines() if "Strategy default" in line)
    assert "precision bfloat16, XLA off (auto precision: CPU with bfloat16 matrix units " in line
    assert (tmp_path / "out" / "model.ckpt-1.index").exists()


def test_float16_on_a_tpu_is_refused_in_one_sentence():
    with pytest.raises(hardware.PrecisionError, match=r"^--mixed_precision=float16 on a TPU"):
        choose(DeviceDescription("tpu"), "float16")
    assert isinstance(hardware.PrecisionError("x"), AlbertError)
    assert choose(DeviceDescription("tpu"), "bfloat16").precision == "bfloat16"

"""`pip install` gives a working ALBERT: the shipped configs are found by name, pyproject.toml
agrees with requirements.txt, and (slow) a wheel installed into a fresh virtual environment
from the package registry runs the quickstart and the commands from outside the clone."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import albert
from albert import configs
from albert.config import AlbertConfig, ConfigError

REPO = Path(__file__).resolve().parents[1]
RELEASED = [
    f"albert_{size}_v{v}" for size in ("base", "large", "xlarge", "xxlarge") for v in (1, 2)
]


# --- Shipped configs ------------------------------------------------------------------------


def test_the_published_configs_ship_inside_the_package():
    assert configs.names() == sorted([*RELEASED, "albert_tiny"])
    for name in configs.names():
        path = Path(configs.path(name))
        assert path.parent == REPO / "albert" / "configs" and path.is_file()
        AlbertConfig.from_json_file(str(path))  # each one is a valid config


@pytest.mark.parametrize(
    "name", ["albert_base_v2", "base_v2", "albert_base_v2.json", "base_v2.json"]
)
def test_a_config_is_found_by_its_name_with_or_without_prefix_and_suffix(name):
    assert configs.path(name) == str(REPO / "albert" / "configs" / "albert_base_v2.json")
    config = AlbertConfig.from_json_file(name)
    assert (config.hidden_size, config.num_hidden_layers, config.embedding_size) == (768, 12, 128)


def test_an_existing_file_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = json.loads(Path(configs.path("albert_tiny")).read_text())
    Path("albert_base_v2").write_text(json.dumps({**values, "hidden_size": 32}))
    assert configs.resolve("albert_base_v2") == "albert_base_v2"
    assert AlbertConfig.from_json_file("albert_base_v2").hidden_size == 32


def test_a_wrong_name_is_one_sentence_listing_the_names():
    with pytest.raises(ConfigError) as raised:
        AlbertConfig.from_json_file("base_v3")
    message = str(raised.value)
    assert "\n" not in message and "'base_v3'" in message
    assert message.endswith(", ".join(configs.names()) + ".")


def test_the_former_clone_path_says_to_pass_the_name():
    with pytest.raises(ConfigError, match="pass the name 'albert_large_v1' instead"):
        AlbertConfig.from_json_file("configs/albert_large_v1.json")
    with pytest.raises(ConfigError, match="Config file not found: no/such.json"):
        AlbertConfig.from_json_file("no/such.json")  # any other missing path: as before


def test_plain_import_albert_gives_configs_path_without_tensorflow():
    """The README's `albert.configs.path(...)` after a plain `import albert`, in a fresh
    interpreter (this one has imported albert.configs already), and nothing heavy loaded."""
    program = (
        "import sys, albert\n"
        "print(albert.configs.path('albert_base_v2'))\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'numpy') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    path, heavy = done.stdout.splitlines()
    assert path == str(REPO / "albert" / "configs" / "albert_base_v2.json")
    assert heavy == "[]"


# --- pyproject.toml -------------------------------------------------------------------------


def _requirements_sections():
    """requirements.txt's sections ("Runtime", "Development and CI") -> normalised pins."""
    sections, current = {}, None
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if line.startswith("#"):
            current = sections.setdefault(line.lstrip("# ").strip(), set())
        elif line.split("#")[0].strip():
            current.add(str(Requirement(line.split("#")[0].strip())))
    return sections


def _pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_pyproject_dependencies_are_the_runtime_part_of_requirements_txt():
    project = _pyproject()["project"]
    sections = _requirements_sections()
    # requirements.txt installs everything CI runs; the Beam data path is an extra for users.
    beam = {str(Requirement(r)) for r in project["optional-dependencies"]["beam"]}
    assert {str(Requirement(r)) for r in project["dependencies"]} | beam == sections["Runtime"]
    assert not beam & {str(Requirement(r)) for r in project["dependencies"]}
    dev = {str(Requirement(r)) for r in project["optional-dependencies"]["dev"]}
    assert dev <= sections["Development and CI"]  # the same pins, ruff's exact one included


def test_keras_is_bounded_to_versions_that_save_the_encoder():
    """Keras before 3.15 walks one level of lists when it saves: the encoder's blocks
    (`attention_blocks[owner][inner]`) are left out of .keras and .weights.h5 files, and a
    saved model reloads with a random encoder and no error. Keras 3.13+ needs Python 3.11."""
    project = _pyproject()["project"]
    keras = {r.name: r for r in map(Requirement, project["dependencies"])}["keras"]
    assert not keras.specifier.contains("3.14.1") and keras.specifier.contains("3.15.0")
    assert not SpecifierSet(project["requires-python"]).contains("3.10")


def test_every_console_script_names_a_function_that_exists():
    scripts = _pyproject()["project"]["scripts"]
    assert set(scripts) == {
        "albert-pretrain",
        "albert-create-data",
        "albert-classify",
        "albert-squad",
        "albert-race",
        "albert-convert",
        "albert-vocab",
        "albert-quickstart",
    }
    for target in scripts.values():  # read, not imported: importing defines global flags
        module, function = target.split(":")
        tree = ast.parse((REPO / Path(*module.split("."))).with_suffix(".py").read_text())
        (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
        assert len(node.args.args) == len(node.args.defaults), f"{target} needs arguments"
    assert _pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "albert.__version__"
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+", albert.__version__)


# --- The wheel, installed from the registry into a fresh virtual environment ----------------


def _run(command, cwd, env, timeout=600):
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    seconds = time.monotonic() - started
    print(f"{seconds:6.1f} s  {' '.join(str(c) for c in command)[:120]}")
    return done


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs_outside_the_clone(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    # Build from a copy, so that setuptools' build/ and egg-info stay out of the clone.
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source)
    shutil.copy(REPO / "README.md", source)
    shutil.copytree(
        REPO / "albert", source / "albert", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    wheels = tmp_path / "wheels"
    done = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", str(source), "-w", str(wheels)],
        tmp_path,
        env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = wheels.glob("albert_tf2-*.whl")
    assert wheel.name.startswith(f"albert_tf2-{albert.__version__}-")

    venv = tmp_path / "venv"
    try:
        done = _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
        assert done.returncode == 0, done.stderr[-3000:]
        bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
        python = bin_dir / "python"
        # Dependencies come from the package registry: nothing of this environment is shared.
        done = _run([python, "-m", "pip", "install", str(wheel)], tmp_path, env, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]

        outside = tmp_path / "outside"  # no albert/ here, and the clone is not on any path
        outside.mkdir()
        probe = (
            "import importlib.metadata as m, albert, albert.configs as c; "
            "print(albert.__file__); print(m.version('albert-tf2') == albert.__version__); "
            "print(c.path('base_v2'))"
        )
        done = _run([python, "-c", probe], outside, env)
        assert done.returncode == 0, done.stderr[-3000:]
        package_file, same_version, config_path = done.stdout.splitlines()
        assert Path(package_file).is_relative_to(venv) and same_version == "True"
        assert Path(config_path).is_relative_to(venv) and Path(config_path).is_file()

        # The quickstart end to end, tiny: every step is a `python -m albert.<module>` run.
        done = _run(
            [
                bin_dir / "albert-quickstart",
                "--num_train_steps=12",
                "--max_corpus_chars=600000",
                "--output_dir=quickstart",
            ],
            outside,
            env,
        )
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
        results = (outside / "quickstart" / "pretrain" / "eval_results.txt").read_text()
        assert "global_step = 12" in results and "sentence_order_accuracy" in results
        for module in (
            "albert.data.vocab",
            "albert.create_pretraining_data",
            "albert.run_pretraining",
        ):
            assert f"{python} -m {module} " in done.stdout

        # A console script: --helpshort, and a real run that reaches main (a one-line error).
        done = _run([bin_dir / "albert-pretrain", "--helpshort"], outside, env)
        assert done.returncode == 1 and "albert-pretrain" in done.stdout, done.stderr[-3000:]
        assert "Try --helpfull" in done.stdout and "Traceback" not in done.stderr
        done = _run(
            [
                bin_dir / "albert-pretrain",
                "--albert_config_file=base_v9",
                "--input_file=none.tfrecord",
                "--output_dir=out",
                "--do_train",
            ],
            outside,
            env,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert "No config file or shipped config named 'base_v9'" in done.stderr

        # The original's module path.
        done = _run([python, "-m", "albert.run_classifier", "--helpshort"], outside, env)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert "python -m albert.run_classifier --task_name=mrpc" in done.stdout
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # about 2.4 GB

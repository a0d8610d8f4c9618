"""The original's module paths run from the clone: `python -m albert.<module> --helpshort` for
every entry module, run_squad_v1/v2 with --version_2_with_negative fixed, and a config name
that matches nothing is one line listing the shipped configs."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Slow tier: a Python subprocess per entry module and per case (~50 s).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
MODULES = [
    "run_pretraining",
    "run_classifier",
    "run_squad",
    "run_squad_v1",
    "run_squad_v2",
    "run_race",
    "create_pretraining_data",
]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))


def _python(*args, cwd=REPO):
    """`python *args` run to its end, its output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def helpshort():
    """module -> finished `python -m albert.<module> --helpshort`, all started at once."""
    running = {
        module: subprocess.Popen(
            [sys.executable, "-m", f"albert.{module}", "--helpshort"],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for module in MODULES
    }
    done = {}
    for module, process in running.items():
        stdout, stderr = process.communicate(timeout=300)
        done[module] = (process.returncode, stdout, stderr)
    return done


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.xdist_group("entry_points_help")  # one worker: the module fixture is built once
def test_module_imports_and_prints_its_usage(helpshort, module):
    returncode, stdout, stderr = helpshort[module]
    # absl prints the main module's docstring and exits with 1 after --helpshort.
    assert returncode == 1 and "Traceback" not in stderr, stderr[-2000:]
    source = (REPO / "albert" / f"{module}.py").read_text()
    docstring = ast.get_docstring(ast.parse(source))
    assert docstring.splitlines()[0] in stdout
    assert f"python -m albert.{module}" in docstring  # the usage example names the module
    assert "Try --helpfull" in stdout


def _squad_version(module, *args):
    """The --version_2_with_negative that `albert.<module>`'s main hands to the SQuAD task,
    with the task replaced by a print; returns (value printed, stderr)."""
    program = (
        "import sys\n"
        "from albert.tasks import squad\n"
        "squad.run_from_flags = lambda f: print('version_2:', f.version_2_with_negative)\n"
        f"from albert import {module}\n"
        f"sys.argv = ['{module}', *{list(args)!r}]\n"
        f"{module}.run()\n"
    )
    done = _python("-c", program)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = [line for line in done.stdout.splitlines() if line.startswith("version_2:")]
    return printed, done.stderr


@pytest.mark.parametrize(
    "module, args, expected, warned",
    [
        ("run_squad_v1", [], "False", False),
        ("run_squad_v1", ["--version_2_with_negative"], "False", True),
        ("run_squad_v2", [], "True", False),
        ("run_squad_v2", ["--noversion_2_with_negative"], "True", True),
        ("run_squad", ["--version_2_with_negative"], "True", False),
    ],
)
def test_squad_v1_and_v2_fix_the_version(module, args, expected, warned):
    printed, stderr = _squad_version(module, *args)
    assert printed == [f"version_2: {expected}"]
    assert ("--version_2_with_negative=" in stderr and "is ignored" in stderr) == warned, stderr


@pytest.mark.parametrize(
    "module, hint",
    [
        ("run_squad_v1", "run it with python -m albert.run_squad_v2."),  # it ignores the flag
        ("run_squad", "add --version_2_with_negative."),
    ],
)
def test_a_squad_2_file_for_squad_1_says_what_to_run_for_the_command_used(tmp_path, module, hint):
    question = {"id": "q1", "question": "Who?", "answers": [], "is_impossible": True}
    train = tmp_path / "train-v2.0.json"
    train.write_text(
        json.dumps(
            {
                "version": "v2.0",
                "data": [{"paragraphs": [{"context": "Paris.", "qas": [question]}]}],
            }
        )
    )
    command = [
        sys.executable,
        "-m",
        f"albert.{module}",
        "--do_train",
        f"--train_file={train}",
        f"--output_dir={tmp_path}/out",
        f"--vocab_file={tmp_path}/vocab.txt",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert errors == [
        f"{module}.py: error: SQuAD file {str(train)!r} is a SQuAD 2.0 file (it has "
        f"unanswerable questions); {hint}"
    ], done.stderr[-2000:]


def test_unknown_config_name_is_one_line_listing_the_shipped_configs(tmp_path):
    command = [
        sys.executable,
        "-m",
        "albert.run_pretraining",
        "--albert_config_file=base_v9",
        f"--input_file={tmp_path}/none.tfrecord",
        f"--output_dir={tmp_path}/out",
        "--do_train",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr[-2000:]
    assert errors[0].endswith(
        "error: No config file or shipped config named 'base_v9'; pass a path to an "
        "albert_config.json or one of: albert_base_v1, albert_base_v2, albert_large_v1, "
        "albert_large_v2, albert_tiny, albert_xlarge_v1, albert_xlarge_v2, albert_xxlarge_v1, "
        "albert_xxlarge_v2."
    ), errors


# The original's scripts by file name: a clone-based user runs `python <name> ...` there.
ORIGINAL_SCRIPTS = [
    "run_pretraining.py",
    "run_classifier.py",
    "run_squad_v1.py",
    "run_squad_v2.py",
    "run_race.py",
    "create_pretraining_data.py",
]


@pytest.mark.parametrize("script", ORIGINAL_SCRIPTS)
def test_each_original_script_name_runs_from_the_clone(script):
    # run_squad_v1.py and run_squad_v2.py were missing (only run_squad.py, not the original's).
    module = script.removesuffix(".py")
    imports = [
        node.module
        for node in ast.walk(ast.parse((REPO / script).read_text()))
        if isinstance(node, ast.ImportFrom)
    ]
    assert imports == [f"albert.{module}"]


@pytest.mark.parametrize("version, expected", [("v1", "False"), ("v2", "True")])
def test_run_squad_v1_and_v2_py_fix_the_version(version, expected):
    program = (
        "import runpy, sys\n"
        "from albert.tasks import squad\n"
        "squad.run_from_flags = lambda f: print('version_2:', f.version_2_with_negative)\n"
        f"sys.argv = ['run_squad_{version}.py']\n"
        f"runpy.run_path('run_squad_{version}.py', run_name='__main__')\n"
    )
    done = _python("-c", program)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"version_2: {expected}" in done.stdout


@pytest.mark.parametrize(
    "module, given, missing",
    [
        ("create_pretraining_data", "--output_file=o", "input_file"),
        ("convert_checkpoint", "--output=o", "input"),
        ("data.vocab", "--model_prefix=o", "input_file"),
    ],
)
def test_a_missing_required_flag_is_one_line_and_exit_2(tmp_path, module, given, missing):
    """As the run_* scripts, not absl's multi-line `FATAL Flags parsing error` with exit 1."""
    result = _python("-m", f"albert.{module}", given, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(lines) == 1 and lines[0].endswith(f"error: --{missing} is required."), lines
    assert "FATAL" not in result.stderr and "Traceback" not in result.stderr


# Imports each module named in argv with Keras claiming to be 3.10 (older than MIN_KERAS);
# prints module -> [exit code, stderr] (or [exception type, message]).
_WITH_OLD_KERAS = """
import contextlib, importlib, io, json, sys
import keras
keras.__version__ = "3.10.0"
results = {}
for name in sys.argv[1:]:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            importlib.import_module(name)
        results[name] = ["imported", stderr.getvalue()]
    except SystemExit as e:
        results[name] = [e.code, stderr.getvalue()]
    except BaseException as e:
        results[name] = [type(e).__name__, str(e)]
print("RESULTS " + json.dumps(results))
"""
_OLD_KERAS_LINE = (
    "error: albert needs keras>=3.15 (found 3.10.0: earlier versions save no encoder weights); "
    "run: pip install 'keras>=3.15'\n"
)


def _entry_modules():
    """Every command: the console scripts' modules and every module run with `python -m`."""
    pyproject = (REPO / "pyproject.toml").read_text()
    scripts = pyproject.split("[project.scripts]")[1].split("\n[")[0]
    modules = {line.split('"')[1].split(":")[0] for line in scripts.splitlines() if '"' in line}
    for path in (REPO / "albert").rglob("*.py"):
        if '\nif __name__ == "__main__":' in path.read_text():
            parts = path.relative_to(REPO).with_suffix("").parts
            modules.add(".".join(parts))
    return sorted(modules)


def test_an_old_keras_is_one_line_and_exit_2_from_every_entry_module():
    # Was an import traceback ending in serialization.py's ImportError: the model's modules
    # refuse it when imported, which each script does among its first imports.
    modules = _entry_modules()
    assert {"albert.convert_checkpoint", "albert.run_squad_v2", "albert.quickstart"} <= set(modules)
    done = _python("-c", _WITH_OLD_KERAS, *modules)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, done.stderr[-3000:]
    results = json.loads(lines[-1][len("RESULTS ") :])
    for module, (outcome, stderr) in results.items():
        # A command that never builds a model (create_pretraining_data, vocab, quickstart,
        # whose steps print their own) imports, and works with that Keras.
        assert outcome in (2, "imported"), (module, outcome, stderr)
        if outcome == 2:
            assert stderr.endswith(": " + _OLD_KERAS_LINE) and stderr.count("\n") == 1, stderr
    assert results["albert.convert_checkpoint"] == [2, "convert_checkpoint: " + _OLD_KERAS_LINE]
    assert results["albert.run_classifier"][0] == 2


def test_an_old_keras_is_one_line_from_a_clone_script():
    program = (
        "import runpy, sys\n"
        "import keras\n"
        "keras.__version__ = '3.10.0'\n"
        "sys.argv = ['run_classifier.py', '--task_name=mrpc']\n"
        "runpy.run_path('run_classifier.py', run_name='__main__')\n"
    )
    done = _python("-c", program)
    assert done.returncode == 2
    assert done.stderr.endswith("run_classifier.py: " + _OLD_KERAS_LINE), done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def test_the_library_still_refuses_an_old_keras_on_import():
    program = "import keras\nkeras.__version__ = '3.10.0'\nimport albert.modeling\n"
    done = _python("-c", program)
    assert done.returncode == 1
    assert done.stderr.endswith(
        "ImportError: albert needs keras>=3.15 (found 3.10.0: earlier "
        "versions save no encoder weights); run: pip install 'keras>=3.15'\n"
    )

"""The package's import graph: every module imports, and the layers import only downwards.

Every module is imported in one child process, so the test leaves this one's absl flags and
Keras state alone. The entry points (`run_*.py`, `convert_checkpoint.py`) each define their
own flags, as separate programs do: they are imported after every library module, each with
the flags and entry modules of the one before it forgotten, as in a process of its own. A
module that still fails with a duplicate flag is imported again in a process of its own,
where any failure counts.

The layer rules are read from the source with `ast` (every import statement, function-level
ones included), not from `sys.modules`, so a lazy import inside a function is caught too.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "albert"

# package -> packages it must never import (directly, at any depth of its own source).
LAYER_RULES = {
    "albert.modeling": ("albert.training", "albert.tasks"),
    "albert.data": ("albert.training", "albert.tasks"),
    "albert.checkpoints": ("albert.training", "albert.tasks"),
    "albert.metrics": ("albert.training", "albert.tasks"),
    "albert.training": ("albert.tasks", "albert.data", "albert.modeling"),
}
DATA_METRICS_RULES = {
    "albert.data": ("albert.metrics",),
    "albert.metrics": ("albert.data",),
}

_IMPORTER = """
import importlib, json, sys, traceback
from absl import app, flags, logging  # absl's own flags, defined before any program's
libraries, programs = json.loads(sys.argv[1])
results = {}
for name in libraries + programs:
    known_flags, known_modules = set(flags.FLAGS), set(sys.modules)
    try:
        importlib.import_module(name)
        results[name] = None
    except BaseException as error:
        results[name] = {
            "type": type(error).__name__,
            "traceback": "".join(traceback.format_exception(error))[-3000:],
        }
    if name in programs:
        # Its flags, and the programs it brought in (every library is in already), are
        # forgotten: the next program imports as it would in a process of its own.
        for flag in set(flags.FLAGS) - known_flags:
            delattr(flags.FLAGS, flag)
        for module in set(sys.modules) - known_modules:
            if module.startswith("albert."):
                del sys.modules[module]
print("RESULTS " + json.dumps(results))
"""


def _module_name(path):
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _module_files():
    """{module name: source file} of every module under albert/, packages included."""
    files = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    return {_module_name(path): path for path in files}


MODULES = _module_files()


def _programs():
    """The modules whose top-level statements define absl flags (`flags.DEFINE_*`,
    `*.define_*_flags()`), as the entry points do, or import such a module."""
    programs, imports = set(), {}
    for name, path in MODULES.items():
        imports[name] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imports[name] |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imports[name] |= {alias.name for alias in node.names}
            call = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
            if isinstance(call, ast.Call):
                function = getattr(call.func, "attr", getattr(call.func, "id", ""))
                if function.startswith(("DEFINE", "define_")):
                    programs.add(name)
    while True:  # and what imports a program, at its top level
        more = {name for name, targets in imports.items() if targets & programs} - programs
        if not more:
            return programs
        programs |= more


PROGRAMS = _programs()


def _import_in_child(names):
    """{name: None, or the error's type and traceback} of importing each module: the libraries
    first, then each program after them, in turn."""
    programs = [n for n in names if n in PROGRAMS]
    libraries = [n for n in names if n not in programs]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    process = subprocess.run(
        [sys.executable, "-c", _IMPORTER, json.dumps([libraries, programs])],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, (
        f"the importing process died (exit {process.returncode}): {process.stderr[-3000:]}"
    )
    return json.loads(lines[-1][len("RESULTS ") :])


@pytest.fixture(scope="module")
def import_results():
    results = _import_in_child(sorted(MODULES))
    for name, error in sorted(results.items()):
        if error and error["type"] == "DuplicateFlagError":
            results.update(_import_in_child([name]))  # its own process: any failure counts
    return results


def test_the_walk_finds_the_package():
    for name in ("albert", "albert.training.loop", "albert.tasks.pretraining"):
        assert name in MODULES
    assert not (PACKAGE / "training" / "pretraining.py").exists()  # a task now


# Slow tier: importing every module (TensorFlow, Keras) in a child process takes about 8 s.
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.xdist_group("import_graph")  # one worker: the module fixture is built once
def test_module_imports(import_results, name):
    error = import_results[name]
    assert error is None, f"import {name} failed:\n{error['traceback']}"


def _import_statements(path):
    """[(line, statement, modules)] for every import statement in the file, at any depth.

    `from a.b import c` imports `a.b` and maybe the module `a.b.c`: both are listed.
    """
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    statements = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        statements.append((node.lineno, ast.unparse(node), modules))
    return statements


def _violations(rules):
    """["albert/x/y.py:12: from albert.z import w", ...]: every import that breaks `rules`."""
    violations = []
    for name, path in MODULES.items():
        forbidden = [
            target
            for owner, targets in rules.items()
            if name == owner or name.startswith(owner + ".")
            for target in targets
        ]
        for line, statement, modules in _import_statements(path):
            if any(m == t or m.startswith(t + ".") for m in modules for t in forbidden):
                violations.append(f"{path.relative_to(REPO)}:{line}: {statement}")
    return violations


@pytest.mark.parametrize("owner", sorted(LAYER_RULES))
def test_layers_import_only_downwards(owner):
    violations = _violations({owner: LAYER_RULES[owner]})
    assert not violations, (
        f"{owner} must not import {', '.join(LAYER_RULES[owner])}:\n" + "\n".join(violations)
    )


def test_data_and_metrics_do_not_import_each_other():
    violations = _violations(DATA_METRICS_RULES)
    assert not violations, "albert.data and albert.metrics import each other:\n" + "\n".join(
        violations
    )

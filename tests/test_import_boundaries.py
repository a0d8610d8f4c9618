"""The layers' import rules, read from the source with `ast` (function-level imports count):
albert/data imports no albert.metrics and albert/metrics no albert.data."""

import ast
from pathlib import Path

import pytest

ALBERT = Path(__file__).resolve().parents[1] / "albert"


def imported_modules(path):
    """(line, module) of every import in a file, `from a import b` giving a and a.b."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


@pytest.mark.parametrize(
    "package, forbidden", [("data", "albert.metrics"), ("metrics", "albert.data")]
)
def test_no_import_between_data_and_metrics(package, forbidden):
    found = [
        f"{path.relative_to(ALBERT.parent)}:{line} imports {module}"
        for path in sorted((ALBERT / package).rglob("*.py"))
        for line, module in imported_modules(path)
        if module == forbidden or module.startswith(forbidden + ".")
    ]
    assert not found, found

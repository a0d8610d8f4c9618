"""The guard of the tests that check against real HF (`helpers.import_torch_and_transformers`):
where triton is installed and crashes a process that has loaded TensorFlow, the module is
skipped with the fix named, instead of the crash taking down a pytest worker. The probes here
are bare Python processes (no TensorFlow), so these run on every machine, torch or not."""

import importlib.util
import types

import helpers
import pytest

SEGFAULT = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
IMPORT_ERROR = "raise ImportError('no triton')"


@pytest.fixture
def triton_installed(monkeypatch):
    """torch, transformers and triton all "installed": stand-ins for the two imports, and a
    spec found for triton."""
    stand_ins = {name: types.ModuleType(name) for name in ("torch", "transformers")}
    monkeypatch.setattr(pytest, "importorskip", lambda name: stand_ins[name])
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "triton" else find_spec(name, *a),
    )
    return stand_ins


def test_a_probe_killed_by_a_signal_skips_the_module_naming_the_fix(triton_installed):
    with pytest.raises(pytest.skip.Exception, match="signal 11") as skipped:
        helpers.import_torch_and_transformers(probe=SEGFAULT)
    assert "CPU wheel" in str(skipped.value)


def test_a_probe_that_exits_is_no_crash(triton_installed):
    """An error exit (an ImportError in the probe, say) is not the crash guarded against: the
    modules are returned and the tests run (and fail loudly if something is broken)."""
    torch, transformers = helpers.import_torch_and_transformers(probe=IMPORT_ERROR)
    assert (torch, transformers) == (triton_installed["torch"], triton_installed["transformers"])


def test_without_triton_nothing_is_probed(monkeypatch, triton_installed):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    torch, _ = helpers.import_torch_and_transformers(probe=SEGFAULT)
    assert torch is triton_installed["torch"]

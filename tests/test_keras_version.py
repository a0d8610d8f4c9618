"""albert.keras_version: the library refuses an old Keras on import; a script says so in one
line and exits with status 2 (every entry module: tests/test_entry_points.py)."""

import keras
import pytest

from albert import keras_version


def test_an_old_keras_exits_2_with_one_line_naming_both_versions(monkeypatch, capsys):
    monkeypatch.setattr(keras, "__version__", "3.14.1")
    with pytest.raises(SystemExit) as exit_info:
        keras_version.exit_if_too_old("convert_checkpoint")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "convert_checkpoint: error: albert needs keras>=3.15 (found 3.14.1: earlier versions "
        "save no encoder weights); run: pip install 'keras>=3.15'\n"
    )


def test_a_recent_keras_goes_on(capsys):
    assert keras_version.exit_if_too_old("convert_checkpoint") is None
    assert capsys.readouterr().err == ""

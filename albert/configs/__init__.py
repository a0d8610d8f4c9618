"""The published ALBERT configs, shipped with the package.

`albert_{base,large,xlarge,xxlarge}_v{1,2}.json` are the original release's `albert_config.json`
files, unchanged; `albert_tiny.json` is a 4-layer, H=64 model for smoke tests. Wherever a config
file is read (`AlbertConfig.from_json_file`, so every `--albert_config_file`), a bare name such
as `albert_base_v2`, `base_v2` or `albert_base_v2.json` that is not an existing file means the
shipped config of that name.

Example:
    >>> from albert import configs
    >>> configs.path("base_v2")  # doctest: +ELLIPSIS
    '.../albert/configs/albert_base_v2.json'
"""

from __future__ import annotations

import os

from albert.config import ConfigError
from albert.fileio import is_remote

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
_PREFIX = "albert_"
_SUFFIX = ".json"


class ConfigNameError(ConfigError):
    """A config name that is neither an existing file nor a shipped config."""


def names() -> list[str]:
    """The shipped configs' names, sorted: `albert_base_v1`, ..., `albert_xxlarge_v2`."""
    return sorted(f[: -len(_SUFFIX)] for f in os.listdir(DIRECTORY) if f.endswith(_SUFFIX))


def path(name: str) -> str:
    """The absolute path of the shipped config `name`.

    Args:
        name: `albert_base_v2`, or without the `albert_` prefix (`base_v2`), with or without
            `.json`.

    Returns:
        The path of the JSON file inside the installed package.

    Raises:
        ConfigNameError: no shipped config has that name; the message lists the names.
    """
    stem = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else name
    available = names()
    for candidate in (stem, _PREFIX + stem):
        if candidate in available:
            return os.path.join(DIRECTORY, candidate + _SUFFIX)
    raise ConfigNameError(
        f"No config file or shipped config named {name!r}; pass a path to an "
        f"albert_config.json or one of: {', '.join(available)}."
    )


def resolve(path_or_name: str) -> str:
    """`path_or_name` itself when it is a file (or a remote path such as gs://...); a bare name
    (no directory part) that is not a file is looked up among the shipped configs.

    Raises:
        ConfigNameError: a bare name that matches neither a file nor a shipped config, or a
            missing file named like a shipped config (such as the clone's former
            `configs/albert_base_v2.json`).
    """
    if is_remote(path_or_name) or os.path.isfile(path_or_name):
        return path_or_name
    if not os.path.dirname(path_or_name):
        return path(path_or_name)
    stem = os.path.basename(path_or_name)[: -len(_SUFFIX)]
    if path_or_name.endswith(_SUFFIX) and stem in names():
        raise ConfigNameError(
            f"Config file not found: {path_or_name}; the published configs ship with the "
            f"package: pass the name {stem!r} instead."
        )
    return path_or_name  # A missing path: the caller reports it.

"""The oldest Keras this package works with, checked on import and by every entry point.

`albert.modeling` refuses an older Keras with an ImportError when it is imported (a library
user sees it where it happens). A command-line script imports it among its first imports, so
the same refusal would come as a long import traceback: each entry point (`run_*.py`,
`convert_checkpoint`) calls `exit_if_too_old` before those imports, which prints
`prog: error: <the sentence>` and exits with status 2, as every other bad-environment error.
This module imports Keras only in `exit_if_too_old`.
"""

from __future__ import annotations

import os
import re
import sys

# Keras before 3.15 leaves layers held in nested lists (`AlbertEncoder`'s blocks) out of .keras
# and .weights.h5 files: a saved model would reload with a random encoder and no error.
MIN_KERAS = (3, 15)


def check_keras_version(version):
    """Raises ImportError, one sentence, for a Keras older than `MIN_KERAS` (a clone run
    without `pip install -r requirements.txt` in an environment that has one)."""
    major, minor = (int(n) for n in re.match(r"(\d+)\.(\d+)", version).groups())
    if (major, minor) < MIN_KERAS:
        wanted = ".".join(map(str, MIN_KERAS))
        raise ImportError(
            f"albert needs keras>={wanted} (found {version}: earlier versions save no "
            f"encoder weights); run: pip install 'keras>={wanted}'"
        )


def exit_if_too_old(program=None):
    """For an entry point, before it imports the model: an installed Keras older than
    `MIN_KERAS` prints `program: error: ...` (the script's file name by default, as
    `albert.training.flags.run_main` names it) and exits with status 2."""
    import keras

    try:
        check_keras_version(keras.__version__)
    except ImportError as e:
        print(f"{program or os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr)
        sys.exit(2)

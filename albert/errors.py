"""The project's one error base class.

Every error that means "the user passed something wrong, or a file is bad" derives from
`AlbertError`, so each command-line entry point can print it as one sentence (see
`albert.cli`) instead of a traceback. It derives from ValueError so that code catching
ValueError, as callers of the earlier per-module errors did, keeps working.
"""

from __future__ import annotations


class AlbertError(ValueError):
    """A user-facing error: bad flags, a missing or malformed file, a full or read-only disk."""


class TrainingDivergedError(AlbertError):
    """The loss or the gradient norm of a training host call is NaN or infinite (see
    `albert.training.divergence`): the run stops before it saves the weights."""

"""Progress lines for long per-example work: feature conversion, file writing, predict passes.

A phase that takes minutes at real size (tokenizing MNLI's 393k pairs, SQuAD 2.0's 130k
questions, RACE's 88k) logs where it is every `PROGRESS_SECONDS`, so a user can tell a slow
run from a hung one:

    mnli train: tokenized 120000/392702 examples (31%) | 4012 examples/s | ETA 0:01:08

Light (absl and the standard library only), so data, training and task code all use it.
"""

from __future__ import annotations

import datetime
import time

from absl import logging

# Seconds between progress lines (as `create_pretraining_data`'s progress).
PROGRESS_SECONDS = 30.0


def format_duration(seconds):
    """`0:01:08` for 68.4 seconds."""
    return str(datetime.timedelta(seconds=int(max(seconds, 0))))


class Progress:
    """Counts work done and logs it every `interval` seconds (never for short work).

    Args:
        what: what is being done, e.g. "mnli train: tokenized".
        total: the count the work ends at, or None when unknown (no percent, no ETA).
        unit: what is counted, e.g. "examples".
        interval: seconds between lines.

    Example:
        >>> progress = Progress("mnli train: tokenized", len(examples), "examples")
        >>> for example in examples:
        ...     features.append(convert(example))
        ...     progress.update()
    """

    def __init__(self, what, total=None, unit="examples", interval=None):
        self.what = what
        self.total = total
        self.unit = unit
        # Read at construction, not import, so a test can shorten it.
        self.interval = PROGRESS_SECONDS if interval is None else interval
        self.count = 0
        self._start = self._last = time.perf_counter()

    def update(self, count=1):
        """Adds `count` units done; logs a line when `interval` has passed since the last."""
        self.count += count
        now = time.perf_counter()
        if now - self._last >= self.interval:
            self._last = now
            logging.info("%s", self.line(now - self._start))

    def line(self, seconds):
        """The progress line after `seconds` of work."""
        rate = self.count / max(seconds, 1e-9)
        if self.total is None:
            return f"{self.what} {self.count} {self.unit} | {rate:.0f} {self.unit}/s"
        percent = 100.0 * self.count / max(self.total, 1)
        eta = format_duration((self.total - self.count) / rate) if rate else "?"
        return (
            f"{self.what} {self.count}/{self.total} {self.unit} ({percent:.0f}%) | "
            f"{rate:.0f} {self.unit}/s | ETA {eta}"
        )

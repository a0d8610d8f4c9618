"""The GLUE benchmark's tasks: names, labels, file layouts and submission files.

One table, shared by the reader (`albert.data.glue`), the metrics (`albert.metrics.glue`) and
the submission writer (`albert.tasks.glue_submission`), so neither layer imports the other:

    task      folder      files (train / dev / test)                      labels
    cola      CoLA        train.tsv dev.tsv test.tsv                      0 1
    sst-2     SST-2       train.tsv dev.tsv test.tsv                      0 1
    mrpc      MRPC        train.tsv dev.tsv test.tsv                      0 1
    sts-b     STS-B       train.tsv dev.tsv test.tsv                      float score (regression)
    qqp       QQP         train.tsv dev.tsv test.tsv                      0 1
    mnli      MNLI        train.tsv dev_matched.tsv test_matched.tsv      contradiction entailment neutral
    mismnli   MNLI        train.tsv dev_mismatched.tsv test_mismatched.tsv (as mnli)
    qnli      QNLI        train.tsv dev.tsv test.tsv                      entailment not_entailment
    rte       RTE         train.tsv dev.tsv test.tsv                      entailment not_entailment
    wnli      WNLI        train.tsv dev.tsv test.tsv                      0 1
    ax        diagnostic  test only: AX.tsv or diagnostic.tsv             (as mnli; predicted by an MNLI model)

`get_task` accepts any case and the aliases "sst2", "stsb", "mnli-m" and "mnli-mm". Pure
Python: importing it loads neither TensorFlow nor numpy.
"""

from __future__ import annotations

import dataclasses

from albert.errors import AlbertError

MNLI_LABELS = ("contradiction", "entailment", "neutral")
NLI_LABELS = ("entailment", "not_entailment")
BINARY_LABELS = ("0", "1")
STSB_SCORE_RANGE = (0.0, 5.0)  # similarity scores of the STS-B annotators
TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli-m": "mnli", "mnli-mm": "mismnli"}


class GlueDataError(AlbertError):
    """A GLUE task name, file or row that cannot be read (a user-facing error)."""


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where a file's fields are: 0-based columns, -1 for the last one, None when absent."""

    header: bool
    text_a: int
    text_b: int | None = None
    label: int | None = None
    index: int | None = None

    def required(self):
        """[(field, number of columns a row needs to hold it)], in column order."""
        fields = [("index", self.index), ("text_a", self.text_a), ("text_b", self.text_b)]
        needed = [(name, column + 1) for name, column in fields if column is not None]
        if self.label is not None:
            # A last-column label must come after every other field.
            count = self.label + 1 if self.label >= 0 else max(n for _, n in needed) + 1
            needed.append(("label", count))
        return sorted(needed, key=lambda item: item[1])


_COLA_TRAIN = Columns(header=False, text_a=3, label=1)  # source, label, original label, text
_SST2_TRAIN = Columns(header=True, text_a=0, label=1)
_SINGLE_TEST = Columns(header=True, index=0, text_a=1)
_PAIR_TRAIN = Columns(header=True, index=0, text_a=1, text_b=2, label=-1)
_PAIR_TEST = Columns(header=True, index=0, text_a=1, text_b=2)
_MNLI_TRAIN = Columns(header=True, index=0, text_a=8, text_b=9, label=-1)
_MNLI_TEST = Columns(header=True, index=0, text_a=8, text_b=9)
_STANDARD_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """How to read one GLUE task and name its outputs.

    Attributes:
        name: the canonical `--task_name` (lower case).
        folder: the task's folder in the GLUE download (also tried under `--data_dir`).
        labels: the label strings of the GLUE server, in class-id order; () for regression.
        train_columns: the layout of train and dev files (None: no train/dev set).
        test_columns: the layout of the test file.
        submission_file: the file name the GLUE server expects for test predictions.
        files: split -> candidate file names.
        skip_malformed: skip train/dev rows whose column count differs from the header's
            (QQP); elsewhere a row short of a needed column is an error.
    """

    name: str
    folder: str
    labels: tuple
    train_columns: Columns | None
    test_columns: Columns
    submission_file: str
    files: dict = dataclasses.field(default_factory=lambda: _STANDARD_FILES)
    skip_malformed: bool = False

    @property
    def is_regression(self):
        return not self.labels

    @property
    def num_labels(self):
        """Outputs of the classifier head: 1 for regression."""
        return len(self.labels) or 1


def _mnli_files(kind):
    return {"train": ("train.tsv",), "dev": (f"dev_{kind}.tsv",), "test": (f"test_{kind}.tsv",)}


_TASK_LIST = (
    GlueTask("cola", "CoLA", BINARY_LABELS, _COLA_TRAIN, _SINGLE_TEST, "CoLA.tsv"),
    GlueTask("sst-2", "SST-2", BINARY_LABELS, _SST2_TRAIN, _SINGLE_TEST, "SST-2.tsv"),
    GlueTask(
        "mrpc",
        "MRPC",
        BINARY_LABELS,
        Columns(header=True, text_a=3, text_b=4, label=0),
        Columns(header=True, index=0, text_a=3, text_b=4),
        "MRPC.tsv",
    ),
    GlueTask(
        "sts-b",
        "STS-B",
        (),
        Columns(header=True, index=0, text_a=7, text_b=8, label=-1),
        Columns(header=True, index=0, text_a=7, text_b=8),
        "STS-B.tsv",
    ),
    GlueTask(
        "qqp",
        "QQP",
        BINARY_LABELS,
        Columns(header=True, index=0, text_a=3, text_b=4, label=5),
        Columns(header=True, index=0, text_a=1, text_b=2),
        "QQP.tsv",
        skip_malformed=True,
    ),
    GlueTask(
        "mnli", "MNLI", MNLI_LABELS, _MNLI_TRAIN, _MNLI_TEST, "MNLI-m.tsv", _mnli_files("matched")
    ),
    GlueTask(
        "mismnli",
        "MNLI",
        MNLI_LABELS,
        _MNLI_TRAIN,
        _MNLI_TEST,
        "MNLI-mm.tsv",
        _mnli_files("mismatched"),
    ),
    GlueTask("qnli", "QNLI", NLI_LABELS, _PAIR_TRAIN, _PAIR_TEST, "QNLI.tsv"),
    GlueTask("rte", "RTE", NLI_LABELS, _PAIR_TRAIN, _PAIR_TEST, "RTE.tsv"),
    GlueTask("wnli", "WNLI", BINARY_LABELS, _PAIR_TRAIN, _PAIR_TEST, "WNLI.tsv"),
    # GLUE's download script saves AX.tsv as diagnostic/diagnostic.tsv.
    GlueTask(
        "ax",
        "diagnostic",
        MNLI_LABELS,
        None,
        _PAIR_TEST,
        "AX.tsv",
        {"test": ("AX.tsv", "diagnostic.tsv")},
    ),
)
TASKS = {task.name: task for task in _TASK_LIST}


def get_task(task_name):
    """The `GlueTask` of a `--task_name` (case-insensitive; "sst2", "stsb" also accepted).

    Raises:
        GlueDataError: an unknown task name.
    """
    name = task_name.strip().lower()
    name = TASK_ALIASES.get(name, name)
    if name not in TASKS:
        raise GlueDataError(f"Unknown --task_name={task_name!r}; choose one of {', '.join(TASKS)}.")
    return TASKS[name]

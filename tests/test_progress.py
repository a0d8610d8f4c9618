"""albert.progress: the progress line of long per-example work."""

from albert import progress


def test_a_line_every_interval_with_count_percent_rate_and_eta(absl_caplog):
    counter = progress.Progress("mnli train: tokenized", total=7, unit="examples", interval=0)
    counter.update(3)
    lines = [r.getMessage() for r in absl_caplog.records if "tokenized" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("mnli train: tokenized 3/7 examples (43%) | ")
    assert " examples/s | ETA " in lines[0]


def test_an_unknown_total_shows_count_and_rate_only():
    line = progress.Progress("predict: ran", None, "batches").line(seconds=2.0)
    assert line == "predict: ran 0 batches | 0 batches/s"
    counter = progress.Progress("read", None, "examples")
    counter.count = 50
    assert counter.line(seconds=2.0) == "read 50 examples | 25 examples/s"


def test_the_eta_is_the_rest_at_the_rate_so_far():
    counter = progress.Progress("SQuAD: tokenized", 130000, "questions")
    counter.count = 10000
    # 1000 questions/s: 120 000 to go in 2 minutes.
    assert counter.line(seconds=10.0) == (
        "SQuAD: tokenized 10000/130000 questions (8%) | 1000 questions/s | ETA 0:02:00"
    )


def test_short_work_logs_nothing(absl_caplog):
    counter = progress.Progress("quick", total=3)
    counter.update(3)
    assert "quick" not in absl_caplog.text


def test_the_interval_is_read_when_the_work_starts(monkeypatch, absl_caplog):
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    progress.Progress("now", total=2).update()
    assert "now 1/2 examples (50%)" in absl_caplog.text


def test_lines_come_an_interval_after_the_last_line_with_the_rate_since_the_start(
    monkeypatch, absl_caplog
):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    counter = progress.Progress("read", total=1000, unit="rows", interval=10.0)
    for now, count in ((10.0, 100), (12.0, 20), (20.0, 80)):
        clock[0] = now
        counter.update(count)
    lines = [r.getMessage() for r in absl_caplog.records if r.getMessage().startswith("read ")]
    # t=12 is 2 s after the first line: no line; t=20 is 200 rows in 20 s, 10 rows/s.
    assert lines == [
        "read 100/1000 rows (10%) | 10 rows/s | ETA 0:01:30",
        "read 200/1000 rows (20%) | 10 rows/s | ETA 0:01:20",
    ]


def test_more_than_the_total_shows_no_time_left():
    # The total is an estimate (e.g. features per example): past it, the ETA is 0, not -1 day.
    counter = progress.Progress("SQuAD: features", 10, "features")
    counter.count = 20
    assert counter.line(seconds=4.0).endswith("| 5 features/s | ETA 0:00:00")

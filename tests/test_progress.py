"""The progress bar's estimate of the time left: a moving average that skips the first step."""

from __future__ import annotations

import io

import pytest

from riemfl import progress
from riemfl.progress import MIN_TIMED_STEPS, ProgressBar


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", c)
    return c


def _steps(bar, clock, seconds):
    for dt in seconds:
        clock.now += dt
        bar.update()


def test_the_bar_says_estimating_until_enough_steps_are_timed(clock):
    bar = ProgressBar(100, "run", stream=io.StringIO())
    assert "<estimating" in bar.render()
    _steps(bar, clock, [5.0] * MIN_TIMED_STEPS)  # the first step only starts the clock
    assert bar.remaining() is None and "<estimating" in bar.render()
    _steps(bar, clock, [5.0])
    assert bar.remaining() == pytest.approx(97 * 5.0)
    assert "<485.0s" in bar.render()


def test_a_slow_first_step_does_not_inflate_the_estimate(clock):
    """The floral run's first estimate was 28x its length: the first step carried the setup."""
    bar = ProgressBar(50, stream=io.StringIO())
    _steps(bar, clock, [300.0, 2.0, 2.0, 2.0])
    assert bar.remaining() == pytest.approx(46 * 2.0)


def test_the_estimate_follows_a_change_of_pace(clock):
    bar = ProgressBar(200, stream=io.StringIO())
    _steps(bar, clock, [1.0] * 10 + [4.0] * 20)
    per_step = bar.remaining() / (200 - 30)
    assert 3.9 < per_step <= 4.0  # the mean over all steps would say 3.0


def test_plain_lines_every_tenth_on_a_non_terminal(clock):
    out = io.StringIO()
    with ProgressBar(20, "job", stream=out) as bar:
        _steps(bar, clock, [1.0] * 20)
    lines = out.getvalue().splitlines()
    assert len(lines) == 11 and lines[0].startswith("job [")  # deciles 0 to 10
    assert "estimating" in lines[0] and lines[-1].endswith("20/20  20.0s<0.0s")


def test_a_disabled_bar_writes_nothing(clock):
    out = io.StringIO()
    with ProgressBar(5, stream=out, enabled=False) as bar:
        _steps(bar, clock, [1.0] * 5)
    assert out.getvalue() == ""


def test_a_non_terminal_bar_ends_at_its_total_when_the_total_is_revised(clock):
    """zhang2024 estimates its total (the held-out runs of the sweep are known only later) and
    sets it to the count at the end: the last line said 12744/14160, the ninth tenth."""
    out = io.StringIO()
    with ProgressBar(30, "job", stream=out) as bar:
        _steps(bar, clock, [1.0] * 19)
        bar.total = bar.count  # the estimate made exact, with no further update
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("job [########################] 19/19")
    assert sum("19/19" in line for line in lines) == 1  # the final line once, not twice


def test_skipped_steps_reach_the_total_and_are_said_as_cached(clock):
    """A run read back from its checkpoint advances the bar without a step of work: it counts
    towards the total, shows as cached, and does not shorten the estimate per step."""
    out = io.StringIO()
    with ProgressBar(30, "job", stream=out) as bar:
        _steps(bar, clock, [2.0] * 5)
        clock.now += 30.0  # reading a checkpoint back: not an interval of work
        bar.skip(10)
        _steps(bar, clock, [2.0] * 5)
        assert bar.skipped == 10 and bar.count == 20
        assert bar.remaining() == pytest.approx(10 * 2.0)  # 2 s per step of work
        bar.skip(10)
    last = out.getvalue().splitlines()[-1]
    assert "30/30 (20 cached)" in last
    bar = ProgressBar(10, stream=io.StringIO())
    bar.skip(10)
    bar.close()
    assert "10/10 (10 cached)" in bar.stream.getvalue()


def test_a_terminal_bar_draws_its_final_count_on_close(clock):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    with ProgressBar(10, "job", stream=out, min_interval=100.0) as bar:
        _steps(bar, clock, [1.0] * 3)  # the first drawn, the next two within min_interval
        bar.skip(7)
    assert out.getvalue().endswith("10/10 (7 cached)  3.0s<0.0s\n")

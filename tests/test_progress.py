"""Progress lines of long jobs: the countdown inside a loop."""

from harness.progress import Countdown


def test_the_countdown_speaks_at_most_every_interval_and_never_at_the_end(monkeypatch):
    clock = iter([0.0, 1.0, 5.0, 16.0, 20.0, 31.0, 40.0, 41.0, 42.0])
    monkeypatch.setattr("harness.progress.time.perf_counter", lambda: next(clock))
    lines: "list[str]" = []
    c = Countdown(lines.append, 6, every=15.0)  # started at t = 0
    for done in range(1, 7):
        c.tick(done)
    # t = 1, 5: too soon; t = 16: 3 of 6 done at 3/16 per s; t = 20: too soon; t = 31: 5 done; t = 40: the last one
    assert lines == ["3/6 steps, 0.19/s, about 16 s left", "5/6 steps, 0.16/s, about 6 s left"]
    Countdown(None, 3).tick(1)  # no printer: nothing, no error

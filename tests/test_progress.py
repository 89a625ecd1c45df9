"""Progress lines of long jobs: the countdown inside a loop."""

import pytest

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


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped one, by design
def test_a_ctrl_c_dropped_in_a_finaliser_is_raised_again_at_the_next_check(monkeypatch):
    """CPython drops a KeyboardInterrupt raised inside a ``__del__`` ("Exception ignored in ..."): the command line's
    handler remembers the signal, and the training loop's check raises it (a lost Ctrl-C let a run finish)."""
    import os
    import signal

    from harness import progress

    monkeypatch.setitem(progress._CTRL_C, "seen", False)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        progress.install_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is progress.on_ctrl_c
        progress.check_ctrl_c()  # nothing seen: nothing raised

        class Finalised:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(1000))  # the handler runs here, inside the finaliser, and its exception is dropped

        Finalised()  # collected at once: the KeyboardInterrupt is lost, this line returns
        with pytest.raises(KeyboardInterrupt):
            progress.check_ctrl_c()
    finally:
        signal.signal(signal.SIGINT, previous)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a parent that ignores Ctrl-C: left as it is
    try:
        progress.install_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)

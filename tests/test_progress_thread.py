"""inspect's progress bar draws at each tick, with no refresh thread: a process of one thread may
fork for --verify's NaN/Inf scan (checkpoint/beside.py)."""

import pytest


@pytest.mark.parametrize("thread", [False, True])
def test_inspect_progress_bar_runs_no_thread_so_its_work_may_fork(monkeypatch, thread):
    import io
    import threading

    from rich.console import Console

    from hccli.cli import output

    sink = io.StringIO()
    monkeypatch.setattr(output, "_stderr", Console(file=sink, force_terminal=True, width=80))
    before = threading.active_count()
    with output.progress_bar("reading headers", thread=thread) as tick:
        tick(3, 48)
        during = threading.active_count()
    assert "reading headers" in sink.getvalue() and "3/48" in sink.getvalue()
    assert during == before + (1 if thread else 0)

import contextlib
import threading
import time

import pytest

from streamer.realtime.swap_stage import StageStopped, SwapStage


def _stage() -> SwapStage:
    stage = SwapStage(contextlib.nullcontext)
    stage.start()
    return stage


def test_hand_waits_until_the_running_job_is_done() -> None:
    stage = _stage()
    release = threading.Event()
    order: list[str] = []
    try:

        def first() -> None:
            release.wait(5.0)
            order.append("first")

        stage.hand(first)
        handed = threading.Event()

        def hand_second() -> None:
            stage.hand(lambda: order.append("second"))
            handed.set()

        threading.Thread(target=hand_second).start()
        assert not handed.wait(0.2)  # a rendezvous: nothing queues behind a running job
        release.set()
        assert handed.wait(5.0)
        assert stage.wait_idle(5.0)
    finally:
        stage.close()
    assert order == ["first", "second"]
    assert stage.busy_seconds() > 0.15  # the first job's wait counts as busy


def test_ready_in_follows_the_running_job() -> None:
    stage = _stage()
    try:
        assert stage.ready_in() == 0.0  # idle, and no estimate yet
        stage.hand(lambda: time.sleep(0.05))
        assert stage.wait_idle(5.0)
        assert stage.duration_s is not None and stage.duration_s >= 0.04
        release = threading.Event()
        stage.hand(lambda: release.wait(5.0))
        time.sleep(0.01)
        assert 0.0 < stage.ready_in() <= stage.duration_s
        release.set()
        assert stage.wait_idle(5.0)
        assert stage.ready_in() == 0.0
    finally:
        stage.close()


def test_a_crashed_job_stops_the_stage_and_the_next_hand_says_why() -> None:
    stage = _stage()

    def bug() -> None:
        raise KeyError("a bug")

    try:
        stage.hand(bug)
        assert stage.wait_idle(5.0)
        assert isinstance(stage.error, KeyError)
        with pytest.raises(StageStopped, match="KeyError"):
            stage.hand(lambda: None)
    finally:
        stage.close()


def test_close_finishes_the_running_job_and_is_idempotent() -> None:
    stage = _stage()
    started, release = threading.Event(), threading.Event()
    done: list[bool] = []

    def job() -> None:
        started.set()
        release.wait(5.0)
        done.append(True)

    stage.hand(job)
    assert started.wait(5.0)
    closer = threading.Thread(target=stage.close)
    closer.start()
    time.sleep(0.05)
    release.set()
    closer.join(5.0)
    assert not closer.is_alive() and done == [True]
    stage.close()
    with pytest.raises(StageStopped, match="closed"):
        stage.hand(lambda: None)


def test_the_stage_thread_runs_inside_its_context() -> None:
    entered: list[str] = []

    @contextlib.contextmanager
    def activate():  # type: ignore[no-untyped-def]
        entered.append(threading.current_thread().name)
        yield

    stage = SwapStage(activate, name="stage-under-test")
    stage.start()
    try:
        stage.hand(lambda: None)
        assert stage.wait_idle(5.0)
    finally:
        stage.close()
    assert entered == ["stage-under-test"]

import asyncio
from dataclasses import dataclass

import pytest

from streamer.realtime.idle_reaper import IdleReaper


@dataclass
class FakeSession:
    session_id: str
    frames_in: int = 0
    path: bool = False  # what in_network_gap() answers: False, a gone (or merely silent) peer

    def in_network_gap(self) -> bool:
        return self.path


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _reaper(sessions: list[FakeSession], ended: list[tuple[str, str]], clock: Clock) -> IdleReaper:
    async def end(session_id: str, reason: str) -> bool:
        ended.append((session_id, reason))
        sessions[:] = [s for s in sessions if s.session_id != session_id]
        return True

    return IdleReaper(
        lambda: list(sessions), end, idle_timeout_s=5.0, first_frame_timeout_s=15.0, clock=clock
    )


async def test_a_session_whose_frames_stop_is_ended_after_the_timeout_and_an_active_one_is_not() -> None:
    clock = Clock()
    sessions = [FakeSession("stalls", 10), FakeSession("active", 10)]
    ended: list[tuple[str, str]] = []
    reaper = _reaper(sessions, ended, clock)
    assert await reaper.sweep() == []
    for _ in range(6):  # 6 s: "active" keeps receiving, "stalls" does not
        clock.now += 1.0
        sessions[1].frames_in += 30
        await reaper.sweep()
    assert [session_id for session_id, _ in ended] == ["stalls"]
    assert "no video for 6.0 s" in ended[0][1]
    assert [s.session_id for s in sessions] == ["active"] and reaper.reaped == 1


async def test_a_session_that_never_receives_a_frame_gets_the_first_frame_grace() -> None:
    clock = Clock()
    sessions = [FakeSession("never")]
    ended: list[tuple[str, str]] = []
    reaper = _reaper(sessions, ended, clock)
    await reaper.sweep()
    clock.now += 14.0
    assert await reaper.sweep() == []
    clock.now += 2.0
    assert await reaper.sweep() == ["never"]
    assert "no first frame" in ended[0][1]


async def test_gone_sessions_are_forgotten_so_a_reused_id_starts_fresh() -> None:
    clock = Clock()
    sessions = [FakeSession("a", 5)]
    reaper = _reaper(sessions, [], clock)
    await reaper.sweep()
    sessions.clear()
    clock.now += 10.0
    await reaper.sweep()
    sessions.append(FakeSession("a", 5))
    assert await reaper.sweep() == []  # first sighting counts as activity


async def test_the_background_task_sweeps_and_close_is_idempotent() -> None:
    swept = asyncio.Event()
    sessions = [FakeSession("idle", 1)]

    async def end(session_id: str, reason: str) -> bool:
        swept.set()
        sessions.clear()
        return True

    reaper = IdleReaper(lambda: list(sessions), end, idle_timeout_s=0.1, interval_s=0.02)
    await reaper.close()  # before start: fine, and start is then refused
    with pytest.raises(RuntimeError):
        reaper.start()
    reaper = IdleReaper(lambda: list(sessions), end, idle_timeout_s=0.1, interval_s=0.02)
    reaper.start()
    await asyncio.wait_for(swept.wait(), 2.0)
    await asyncio.gather(reaper.close(), reaper.close())


async def test_a_failing_sweep_is_logged_and_reaping_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0
    recovered = asyncio.Event()

    def sessions() -> list[FakeSession]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("registry hiccup")
        recovered.set()
        return []

    async def end(session_id: str, reason: str) -> bool:
        return True

    reaper = IdleReaper(sessions, end, idle_timeout_s=0.1, interval_s=0.01)
    reaper.start()
    await asyncio.wait_for(recovered.wait(), 2.0)
    await reaper.close()
    assert "idle sweep failed" in caplog.text


def test_a_non_positive_timeout_is_refused() -> None:
    with pytest.raises(ValueError):
        IdleReaper(list, lambda s, r: asyncio.sleep(0), idle_timeout_s=0)


async def test_a_network_gap_waits_for_the_gap_timeout_and_a_gone_peer_only_for_the_idle_timeout() -> None:
    clock = Clock()
    sessions = [FakeSession("cut", 10, path=True), FakeSession("gone", 10, path=False)]
    ended: list[tuple[str, str]] = []
    reaper = _reaper(sessions, ended, clock)
    await reaper.sweep()
    clock.now += 6.0  # past the idle timeout (5 s)
    assert await reaper.sweep() == ["gone"]
    clock.now += 8.0  # 14 s of silence, the path still alive: waiting
    assert await reaper.sweep() == []
    sessions[0].frames_in += 1  # the path came back: the count starts over
    clock.now += 1.0
    assert await reaper.sweep() == []
    clock.now += 16.0  # the network gap timeout (15 s) is not forever
    assert await reaper.sweep() == ["cut"]
    assert "no video for 16.0 s" in ended[-1][1]


async def test_a_gap_that_turns_into_a_gone_peer_ends_at_the_next_sweep() -> None:
    clock = Clock()
    sessions = [FakeSession("cut", 10, path=True)]
    ended: list[tuple[str, str]] = []
    reaper = _reaper(sessions, ended, clock)
    await reaper.sweep()
    clock.now += 7.0
    assert await reaper.sweep() == []
    sessions[0].path = False  # e.g. ICE consent expired, or the host refused our datagrams
    clock.now += 1.0
    assert await reaper.sweep() == ["cut"]

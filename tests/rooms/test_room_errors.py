"""Bad room jobs get a clear error and nothing else breaks: unknown room, wrong pin, unknown feed, Janus
down, a feed with no video, a bad body or a faceless source, through the API (4xx/502 with a message)
while another job keeps swapping, and through `run_stream.py room` (one line, exit 2)."""

import base64
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.clients.janus_peers import JanusPublisher, JanusSubscriber
from bench.clients.janus_server import OPEN_ROOM, PIN, PIN_ROOM, JanusServer
from bench.clients.network_namespace import ADDRESS
from tests.fakes_pipeline import fake_binding
from tests.integration.daemon_harness import running_daemon
from tests.rooms.room_harness import (
    publishing,
    publishing_as,
    room_config,
    room_probe,
    source_body,
    textured_frame,
    wait_participants,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SOURCE = source_body(textured_frame(seed=5))
DOWN = f"http://{ADDRESS}:9/janus"  # nothing listens there


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{url}/api/rooms", json=body) as response:
        return response.status, await response.json()


async def test_bad_room_jobs_are_refused_while_a_good_one_keeps_swapping(
    janus: JanusServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        running_daemon(fake_binding(), room_config()) as (url, engine),
        aiohttp.ClientSession() as http,
        room_probe(janus.url) as probe,
        JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="carol", feed_id=8101) as carol,
        JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="mute", feed_id=8102, video=False),
        JanusPublisher(janus.url, PIN_ROOM, textured_frame(), display="dave", feed_id=8103, pin=PIN),
    ):
        await wait_participants(probe, OPEN_ROOM, publishing(8101), 15)
        await wait_participants(probe, OPEN_ROOM, publishing(8102), 15)
        good = {"janus": janus.url, "room": OPEN_ROOM, "feed": 8101, "source": SOURCE}
        status, job = await _post(http, url, good)
        assert status == 201, job
        await wait_participants(probe, OPEN_ROOM, publishing_as("carol (swapped)"), 10)
        async with JanusSubscriber(
            janus.url, OPEN_ROOM, int(job["published_id"]), sent_ms=carol.track.sent_ms
        ) as viewer:
            await viewer.wait_for_frames(15, timeout=20)
            cases: list[tuple[dict[str, Any], int, str]] = [
                ({**good, "room": 999}, 404, "no room 999"),
                ({**good, "room": PIN_ROOM, "feed": 8103, "pin": "pin-bogus-55"}, 403, "pin"),
                ({**good, "room": PIN_ROOM, "feed": 8103}, 403, "pin"),
                ({**good, "feed": 4242}, 404, "no feed 4242"),
                ({**good, "display": "nobody", "feed": None}, 404, "no feed 'nobody'"),
                ({**good, "janus": DOWN}, 502, "Janus unreachable"),
                ({**good, "feed": 8102}, 422, "no video"),
                ({**good, "source": "not base64!"}, 400, "base64"),
                ({**good, "source": base64.b64encode(b"GIF89a not a photo").decode()}, 415, "source"),
                ({**good, "source": source_body(textured_frame(seed=5)[:1, :1])}, 422, "face"),
                ({"room": OPEN_ROOM}, 400, "required"),
                ({**good, "display": "carol"}, 400, "one of them"),
            ]
            for body, expected, words in cases:
                status, answer = await _post(http, url, body)
                assert status == expected and words in answer["error"], (body.get("room"), status, answer)
                assert PIN not in answer["error"] and "pin-bogus-55" not in answer["error"]
            before = len(viewer.received)
            await viewer.wait_for_frames(before + 15, timeout=10)  # the good job kept swapping
            assert engine.registry is not None and len(engine.registry) == 1  # nothing left behind
            async with http.get(f"{url}/api/rooms") as response:
                jobs = await response.json()
            assert [entry["state"] for entry in jobs] == ["swapping"]
        # the pin room with the right pin works
        status, job = await _post(http, url, {**good, "room": PIN_ROOM, "feed": 8103, "pin": PIN})
        assert status == 201, job
        assert PIN not in json.dumps(job)
    assert PIN not in caplog.text and "pin-bogus-55" not in caplog.text  # pins are never logged


def _room_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "run_stream.py", "room", "--ice-address", ADDRESS, *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("room", "janus_down", "words"),
    [(999, False, "no room 999"), (OPEN_ROOM, True, "cannot be reached"), (OPEN_ROOM, False, "no feed 5")],
)
def test_room_command_says_what_is_wrong_in_one_line(
    janus: JanusServer, media_dir: Path, models_dir: Path, room: int, janus_down: bool, words: str
) -> None:
    url = DOWN if janus_down else janus.url
    done = _room_command(
        "--janus", url, "--room", str(room), "--feed", "5", "--source", str(media_dir / "fr_biden2.jpg"),
        "--models-dir", str(models_dir), "--pin", "pin-never-shown",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], done.stderr[-2000:]
    assert "pin-never-shown" not in done.stderr


async def test_a_full_worker_says_so_on_ready_and_refuses_the_next_job(janus: JanusServer) -> None:
    """The routing rule of docs/deploy.md: a room job is a session, so a worker at --max-sessions answers
    503 on /ready (its Service stops sending it jobs) and a job that reaches it anyway gets 503."""
    async with (
        running_daemon(fake_binding(), room_config(max_sessions=1)) as (url, _engine),
        aiohttp.ClientSession() as http,
        room_probe(janus.url) as probe,
        JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="gus", feed_id=8201),
    ):
        await wait_participants(probe, OPEN_ROOM, publishing(8201), 15)
        async with http.get(f"{url}/ready") as response:
            assert response.status == 200
        body = {"janus": janus.url, "room": OPEN_ROOM, "feed": 8201, "source": SOURCE}
        status, job = await _post(http, url, body)
        assert status == 201, job
        async with http.get(f"{url}/ready") as response:
            ready = await response.json()
            assert response.status == 503 and "capacity" in ready["reason"], ready
        status, refused = await _post(http, url, body)
        assert status == 503 and "slots" in refused["error"], refused
        async with http.delete(f"{url}/api/rooms/{job['id']}") as response:
            assert response.status == 204
        async with http.get(f"{url}/ready") as response:
            assert response.status == 200  # the slot is free again

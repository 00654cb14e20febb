"""`face_selector: "reference"` over a live call: only the face matching the session's reference photo is
swapped (real models: YuNet, face mesh, dlib for identity)."""

import asyncio
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from bench.clients.peer_client import PeerClient
from run_stream import build_parser
from streamer.outputs.frame_stamp import STAMP_HEIGHT
from tests.integration.daemon_harness import camera_frame, running_daemon
from web.serve import load_pipeline_binding


async def _changed_halves(client: PeerClient, camera: np.ndarray) -> tuple[int, int]:
    """Pixels far from the camera's in the left and right halves, once the encoder has settled."""
    mark = len(client.received)
    await client.wait_for_frames(mark + 24, timeout=25)
    received = client.frames[-1][1].astype(np.int16)
    changed = np.abs(received - camera.astype(np.int16)).mean(axis=2) > 40
    changed[:STAMP_HEIGHT] = False
    middle = camera.shape[1] // 2
    return int(changed[:, :middle].sum()), int(changed[:, middle:].sum())


@pytest.mark.slow
async def test_reference_selects_which_face_is_swapped(models_dir: Path, media_dir: Path) -> None:
    args = build_parser().parse_args(["serve", "--models-dir", str(models_dir), "--engine", "mesh"])
    binding = await asyncio.to_thread(load_pipeline_binding, args)
    camera = camera_frame(media_dir, "fr_two_people.jpg")  # Obama on the left, Biden on the right
    async with running_daemon(binding) as (url, _engine):
        async with PeerClient(url, camera, fps=10, keep_frames=1) as client:
            await client.upload_source((media_dir / "fr_alex_lacamoire1.jpg").read_bytes(), "image/jpeg")
            left_many, right_many = await _changed_halves(client, camera)
            # an 85-px face swapped changes ~900-1000 pixels by more than 40 levels (the mesh engine leaves
            # the source's hair and the edge's tone to the target); an unswapped one only codec noise
            assert left_many > 600 and right_many > 600, "face_selector many: both faces are swapped"

            reference = await client.upload_reference((media_dir / "fr_biden.jpg").read_bytes())
            assert len(reference["reference"]["sha256"]) == 64
            await client.patch_settings({"face_selector": "reference"})
            left, right = await _changed_halves(client, camera)
            assert right > right_many / 2, f"Biden matches the reference: his face stays swapped ({right})"
            # what is left on Obama's side is codec residue of the earlier swap, not a swap
            assert left < left_many / 4, f"Obama does not match the reference ({left} vs {left_many} before)"

            stats = await client.session_stats()
            assert stats["has_reference"] is True
        async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as response:
            metrics = await response.text()
    # the pipeline's own stages and the mesh engine's reach the stage histogram
    for stage in ("track", "swap", "warp", "occlusion", "blend"):
        assert f'livefuse_stage_seconds_count{{stage="{stage}"}}' in metrics, stage
    # the mesh engine's occluded faces are counted (the counter is wired to the engine; these faces
    # have nothing in front of them, so it may stay at 0)
    assert "# TYPE livefuse_occluded_faces_total counter" in metrics
    # the hand check's palm searches too: each new face track starts with one
    searches = next(line for line in metrics.splitlines() if line.startswith("livefuse_palm_searches_total "))
    assert float(searches.split()[1]) >= 2, searches
    # and every frame's age as it left each stage, so an operator sees where frames wait
    for stage in ("mailbox", "batch", "swap", "encoder"):
        assert f'livefuse_frame_age_seconds_count{{stage="{stage}"}}' in metrics, stage

"""The app-wide engine: loads off the loop, reports load errors, closes in every state."""

import asyncio
import threading
from fractions import Fraction
from types import SimpleNamespace

import pytest

import web.engine
from gpu_ops.errors import InvalidInputError
from run_stream import build_parser
from streamer.pipeline.config_args import config_from_args
from streamer.pipeline.swap_engines.mesh import MeshConfig, MeshEngine
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.micro_batcher import BATCH_BUCKETS, DEFAULT_MAX_WAIT_MS
from streamer.realtime.pipeline_binding import PipelineBinding
from streamer.transport.encoder_effort import VP8_SPEED, VP8_SPEED_STRAINED, EncoderEffort
from tests.fakes_pipeline import FakePipeline, fake_binding
from web.daemon_config import DaemonConfig
from web.engine import DaemonEngine


async def test_loads_in_a_thread_then_closes_twice() -> None:
    threads: list[str] = []

    def load() -> PipelineBinding:
        threads.append(threading.current_thread().name)
        return fake_binding()

    engine = DaemonEngine(DaemonConfig(), DaemonMetrics(), load)
    assert not engine.ready
    engine.start()
    await engine.loaded
    assert engine.ready and threads and threads[0] != threading.main_thread().name
    await engine.close()
    await engine.close()
    assert not engine.ready and engine.worker is not None and not engine.worker.running


async def test_close_before_start_and_during_loading() -> None:
    await DaemonEngine(DaemonConfig(), DaemonMetrics(), fake_binding).close()
    gate = threading.Event()

    def slow_load() -> PipelineBinding:
        gate.wait(5)
        return fake_binding()

    engine = DaemonEngine(DaemonConfig(), DaemonMetrics(), slow_load)
    engine.start()
    await asyncio.sleep(0)
    await engine.close()
    gate.set()
    assert engine.loaded.cancelled() and not engine.ready


async def test_load_failure_is_reported_and_close_still_works() -> None:
    def broken() -> PipelineBinding:
        raise FileNotFoundError("no models here")

    engine = DaemonEngine(DaemonConfig(), DaemonMetrics(), broken)
    engine.start()
    with pytest.raises(FileNotFoundError):
        await engine.loaded
    assert not engine.ready
    await engine.close()


@pytest.mark.parametrize("on_gpu", [False, True])
async def test_a_cpu_pipeline_gets_every_frame_as_its_own_batch(on_gpu: bool) -> None:
    """On the CPU a batch runs its frames one after another: company saves nothing, and a frame would
    wait for the others' swaps. The GPU keeps the batches (and --batch-wait-ms)."""
    pipeline = FakePipeline()
    pipeline.backend = SimpleNamespace(on_gpu=on_gpu)  # type: ignore[attr-defined]
    args = ["serve", "--batch-wait-ms", "12.5", "--frame-path", "host"]  # host: no device stream to fake
    config = config_from_args(DaemonConfig, build_parser().parse_args(args))
    engine = DaemonEngine(config, DaemonMetrics(), lambda: fake_binding(pipeline))
    engine.start()
    await engine.loaded
    try:
        assert engine.worker is not None
        policy = engine.worker.policy
        if on_gpu:
            assert policy.buckets == BATCH_BUCKETS and policy.max_wait_ms == 12.5
        else:
            assert policy.buckets == (1,) and policy.max_wait_ms == 0.0
    finally:
        await engine.close()


async def test_the_encoders_work_less_while_the_cadence_sheds_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's swap cadence tells the VP8 effort (streamer/transport/encoder_effort.py) when the
    daemon starts and stops shedding frames."""
    effort = EncoderEffort()
    monkeypatch.setattr(web.engine, "encoder_effort", effort)
    engine = DaemonEngine(DaemonConfig(), DaemonMetrics(), fake_binding)
    engine.start()
    await engine.loaded
    try:
        assert engine.cadence is not None and effort.vp8_speed == VP8_SPEED
        engine.cadence._set(Fraction(1, 2), "load")
        assert effort.vp8_speed == VP8_SPEED_STRAINED
    finally:
        await engine.close()


async def test_the_mesh_swap_works_at_a_smaller_size_while_the_cadence_sheds_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same state reaches the mesh engine's working size (MeshEngine.set_strain)."""
    effort = EncoderEffort()
    monkeypatch.setattr(web.engine, "encoder_effort", effort)
    pipeline = FakePipeline()
    mesh = MeshEngine(detector=SimpleNamespace(), landmarker=SimpleNamespace())  # type: ignore[arg-type]
    pipeline.engines = {"mesh": mesh}  # type: ignore[attr-defined]
    engine = DaemonEngine(DaemonConfig(), DaemonMetrics(), lambda: fake_binding(pipeline))
    engine.start()
    await engine.loaded
    try:
        assert engine.cadence is not None and mesh.working_px == MeshConfig().working_px
        engine.cadence._set(Fraction(1, 2), "load")
        assert mesh.working_px == MeshConfig().strained_working_px
    finally:
        await engine.close()


async def test_serve_batch_wait_ms_becomes_the_worker_batch_deadline() -> None:
    config = config_from_args(DaemonConfig, build_parser().parse_args(["serve", "--batch-wait-ms", "12.5"]))
    engine = DaemonEngine(config, DaemonMetrics(), fake_binding)
    engine.start()
    await engine.loaded
    try:
        assert engine.worker is not None and engine.worker.policy.max_wait_ms == 12.5
    finally:
        await engine.close()
    default = config_from_args(DaemonConfig, build_parser().parse_args(["serve"]))
    assert default.batch_policy.max_wait_ms == DEFAULT_MAX_WAIT_MS
    for bad in ("-1", "nan"):
        with pytest.raises(InvalidInputError, match="--batch-wait-ms"):
            config_from_args(DaemonConfig, build_parser().parse_args(["serve", "--batch-wait-ms", bad]))

"""`run_stream.py bench --gpu`: the frame path on the chosen compute backend, stage by stage.

For three workloads, one face per frame, frames arriving as padded I420 planes:
- `inswapper`: upload -> I420->RGB -> batched aligned crop -> inswapper-sized synthetic swapper (batch
  bucketed) -> paste-back -> RGB->I420 -> download;
- `mesh`: upload -> I420->RGB -> mesh warp of a source texture (remap field rasterised from ~800
  triangles on the frame's device, as the mesh engine does) -> shading match -> blend -> RGB->I420 ->
  download;
- `daemon_mesh` (`bench.daemon_path_bench`, needs the models and the benches' photos): the worker's
  own frame conversion and `FramePipeline.process_batch` with the real detector, face mesh and mesh engine.
It reports per-stage ms (synchronised after each stage), single-stream added latency and fps at each
size (no per-stage syncs), batch time per bucket and, replayed through the micro-batcher policy
(stream_capacity.py), how many 30 fps streams are held under 33 ms p95; on the GPU also the CPU/GPU
speed ratio of the same frames. Detection and landmarks are only in the `daemon_mesh` path.
`--quick` shrinks sizes and the model (width 1/16) so the logic runs on CPU in seconds.
"""

import argparse
import contextlib
import json
import logging
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from bench.stream_capacity import max_streams_held
from bench.synthetic_swapper import SyntheticSwapper, build_synthetic_swapper
from gpu_ops.affine import estimate_similarity
from gpu_ops.affine_crop import crop_faces
from gpu_ops.backend import require_cupy
from gpu_ops.color_transfer import match_shading
from gpu_ops.colorspace import i420_to_rgb, rgb_to_i420
from gpu_ops.errors import LivefuseError
from gpu_ops.masks import blend
from gpu_ops.mesh_warp import apply_remap, build_remap
from gpu_ops.paste_back import paste_back
from models.inference import create_session
from models.registry import get_spec
from models.swapper import Swapper, feathered_box_mask, postprocess_swapped
from streamer.pipeline.choices import BackendRequest
from streamer.pipeline.compute_backend import ComputeBackend, choose_backend
from streamer.pipeline.stage_timer import StageClock, StageTimer
from streamer.realtime.device_frames import CupyTransfers, DeviceFrames, HostTransfers, I420Planes, Transfers
from streamer.realtime.micro_batcher import BATCH_BUCKETS

logger = logging.getLogger(__name__)

Workload = Literal["inswapper", "mesh"]
WORKLOADS: tuple[Workload, ...] = ("inswapper", "mesh")
MESH_BOX = 256  # face box side (px) the mesh is warped into
MESH_GRID = 21  # 21x21 vertices -> 800 triangles, about the 898 of the face mesh


@dataclass(frozen=True)
class BenchPlan:
    sizes: tuple[tuple[int, int], ...]
    capacity_size: tuple[int, int]
    swapper_width: float
    frames: int
    cpu_ratio_frames: int


FULL_PLAN = BenchPlan(((1280, 720), (1920, 1080)), (1280, 720), 1.0, 40, 3)
QUICK_PLAN = BenchPlan(((320, 240), (640, 360)), (320, 240), 1.0 / 16, 6, 2)


def synthetic_i420(width: int, height: int, seed: int, pad: int = 64) -> I420Planes:
    """A smooth frame (gradients + noise) as padded planes, like a decoder's output."""
    rng = np.random.default_rng(seed)
    planes = []
    for rows, columns in ((height, width), (height // 2, width // 2), (height // 2, width // 2)):
        ramp = np.add.outer(np.linspace(40, 200, rows), np.linspace(0, 30, columns))
        backing = np.zeros((rows, columns + pad), np.uint8)
        backing[:, :columns] = np.clip(ramp + rng.normal(0, 6, (rows, columns)), 0, 255)
        planes.append(backing[:, :columns])
    return I420Planes(*planes)


def face_alignment(width: int, height: int, jitter: float) -> np.ndarray:
    """Frame -> 128-px inswapper crop matrix for a face filling ~40% of the frame height at the centre."""
    side = 0.4 * height
    template = np.asarray(get_spec("inswapper_128").template, np.float32)
    points = (template / 128.0 - 0.5) * side + np.array([width / 2 + jitter, height / 2], np.float32)
    return np.asarray(estimate_similarity(points[None], template), np.float32).reshape(2, 3)


def grid_triangles(box: int, grid: int, wobble: float) -> np.ndarray:
    """[T,3,2] triangles of a regular grid over a box, inner vertices moved by `wobble` px."""
    axis = np.linspace(1.0, box - 2.0, grid)
    points = np.stack(np.meshgrid(axis, axis), axis=-1).astype(np.float32)
    inner = (slice(1, -1), slice(1, -1))
    points[inner] += wobble * np.sin(points[inner][..., ::-1] / 23.0)
    corners = []
    for row in range(grid - 1):
        for column in range(grid - 1):
            a, b = points[row, column], points[row, column + 1]
            c, d = points[row + 1, column], points[row + 1, column + 1]
            corners += [(a, b, c), (b, d, c)]
    return np.asarray(corners, np.float32)


class FramePath:
    """One workload on one backend: buffers, model and per-face constants prepared once."""

    def __init__(self, backend: ComputeBackend, workload: Workload, swapper: Swapper | None) -> None:
        self.backend = backend
        self.workload = workload
        self.swapper = swapper
        self.xp: Any = np
        transfers: Transfers = HostTransfers()
        if backend.on_gpu:
            transfers = CupyTransfers(backend.stream)
            self.xp = transfers.xp
        self.transfers = transfers
        self.sessions: dict[int, DeviceFrames] = {}
        self.paste_mask = self.xp.asarray(feathered_box_mask((128, 128)))
        rng = np.random.default_rng(7)
        self.latent = rng.standard_normal(512).astype(np.float32)
        self.latent /= np.linalg.norm(self.latent)
        texture = rng.integers(60, 200, (MESH_BOX, MESH_BOX, 4), dtype=np.uint8)
        texture[..., 3] = 255
        self.texture = self.xp.asarray(texture)
        self.src_triangles = grid_triangles(MESH_BOX, MESH_GRID, 0.0)
        self.frame_count = 0

    def sync(self) -> None:
        self.transfers.synchronize()

    def make_inputs(self, size: tuple[int, int], count: int) -> list[I420Planes]:
        return [synthetic_i420(*size, seed=index) for index in range(count)]

    def run_batch(self, inputs: list[I420Planes], timer: StageTimer | None = None) -> list[I420Planes]:
        """All frames of one batch (frame i belongs to session i) through the path; host I420 out."""
        self.frame_count += 1
        stage = StageClock(timer, self.sync)
        for index in range(len(inputs)):
            if index not in self.sessions:
                self.sessions[index] = DeviceFrames(self.transfers)
        devices = [self.sessions[index] for index in range(len(inputs))]
        with self._on_stream():
            uploaded = [frames.upload(planes) for frames, planes in zip(devices, inputs)]
            stage("upload")
            rgb = [i420_to_rgb(*planes) for planes in uploaded]
            stage("i420_to_rgb")
            if self.workload == "inswapper":
                self._swap_faces(rgb, stage)
            else:
                self._mesh_faces(rgb, stage)
            i420 = [I420Planes(*rgb_to_i420(frame)) for frame in rgb]
            stage("rgb_to_i420")
            outputs = [frames.download(planes) for frames, planes in zip(devices, i420)]
            self.sync()
            stage("download")
        return outputs

    def _on_stream(self) -> Any:
        return self.backend.stream if self.backend.on_gpu else contextlib.nullcontext()

    def _swap_faces(self, rgb: list[Any], stage: StageClock) -> None:
        assert self.swapper is not None
        height, width = rgb[0].shape[:2]
        matrices = np.stack([face_alignment(width, height, (self.frame_count % 9) - 4.0) for _ in rgb])
        spec = self.swapper.spec
        crops = crop_faces(
            rgb, np.arange(len(rgb)), matrices, (128, 128), scale=spec.scale, mean=spec.mean, std=spec.std
        )
        stage("crop")
        swapped = self.swapper.swap_crops(crops, np.repeat(self.latent[None], len(rgb), 0))
        faces = postprocess_swapped(swapped)
        stage("swap_model")
        for frame, face, matrix in zip(rgb, faces, matrices):
            paste_back(frame, face, matrix, self.paste_mask)
        stage("paste_back")

    def _mesh_faces(self, rgb: list[Any], stage: StageClock) -> None:
        height, width = rgb[0].shape[:2]
        box = min(MESH_BOX, height - 2, width - 2)
        x1, y1 = (width - box) // 2, (height - box) // 2
        fields = []
        for index in range(len(rgb)):  # every face has its own mesh, so its own field
            wobble = 3.0 + (self.frame_count + index) % 5
            dst = grid_triangles(MESH_BOX, MESH_GRID, wobble) * (box / MESH_BOX)
            fields.append(build_remap(dst, self.src_triangles, (box, box), on_device=self.backend.on_gpu))
        stage("mesh_field")
        warped = [apply_remap(self.texture, field) for field in fields]
        stage("mesh_warp")
        alphas = [face[..., 3].astype(self.xp.float32) * np.float32(1.0 / 255.0) for face in warped]
        regions = [frame[y1 : y1 + box, x1 : x1 + box] for frame in rgb]
        patches = [
            match_shading(self.xp.ascontiguousarray(face[..., :3]), region, alpha)
            for face, region, alpha in zip(warped, regions, alphas)
        ]
        stage("shading")
        for region, patch, alpha in zip(regions, patches, alphas):
            blend(region, patch, alpha)
        stage("blend")


def load_swapper(backend: ComputeBackend, built: SyntheticSwapper, workdir: Path) -> Swapper:
    """A Swapper over the synthetic network on `backend` (file written once per width into `workdir`)."""
    path = workdir / f"synthetic_inswapper_w{built.width:.4f}.onnx"
    if not path.exists():
        path.write_bytes(built.model_bytes)
    spec = get_spec("inswapper_128")
    session = create_session(path, spec, backend.inference_config())
    return Swapper(session, spec, np.eye(512, dtype=np.float32))


class TimedPath(Protocol):
    """What the timing needs of a path: inputs of a size, a batch run (frame i = session i), a sync."""

    def make_inputs(self, size: tuple[int, int], count: int) -> list[Any]: ...

    def run_batch(self, inputs: list[Any], timer: StageTimer | None = None) -> list[Any]: ...


def time_frames(path: TimedPath, size: tuple[int, int], frames: int) -> dict[str, Any]:
    """Per-stage ms (synced stages) and single-stream latency/fps (one sync per frame) at one size."""
    inputs = path.make_inputs(size, max(4, frames))
    for index in range(3):  # warm-up: allocations, kernel compiles, ORT's first runs
        path.run_batch([inputs[index % len(inputs)]])
    timer = StageTimer()
    for index in range(frames):
        path.run_batch([inputs[index % len(inputs)]], timer)
    per_frame = []
    for index in range(frames):
        started = time.perf_counter()
        path.run_batch([inputs[index % len(inputs)]])
        per_frame.append(time.perf_counter() - started)
    latency_ms = float(np.mean(per_frame) * 1000.0)
    return {
        "size": f"{size[0]}x{size[1]}",
        "stages_ms": {summary.stage: round(summary.mean_ms, 3) for summary in timer.summary()},
        "latency_ms": round(latency_ms, 3),
        "p95_latency_ms": round(float(np.percentile(per_frame, 95) * 1000.0), 3),
        "fps": round(1000.0 / latency_ms, 1),
    }


def time_buckets(path: TimedPath, size: tuple[int, int], repeats: int) -> dict[int, float]:
    """Seconds for one batch of each bucket size (median of `repeats`), one frame per session."""
    inputs = path.make_inputs(size, max(BATCH_BUCKETS))
    seconds: dict[int, float] = {}
    for bucket in BATCH_BUCKETS:
        path.run_batch(inputs[:bucket])  # warm-up of this shape
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            path.run_batch(inputs[:bucket])
            samples.append(time.perf_counter() - started)
        seconds[bucket] = float(np.median(samples))
    return seconds


def measure_path(
    path: TimedPath, plan: BenchPlan, cpu_path: Callable[[], TimedPath] | None
) -> dict[str, Any]:
    """Sizes, batch buckets, streams held and (when `cpu_path` is given) the GPU/CPU speed ratio."""
    result: dict[str, Any] = {"sizes": [time_frames(path, size, plan.frames) for size in plan.sizes]}
    batch_seconds = time_buckets(path, plan.capacity_size, max(3, plan.frames // 10))
    result["batch_ms"] = {str(bucket): round(value * 1000.0, 3) for bucket, value in batch_seconds.items()}
    result["batch_seconds"] = {str(bucket): value for bucket, value in batch_seconds.items()}  # replay input
    streams, capacity = max_streams_held(batch_seconds)
    result["streams_held"] = streams
    result["capacity"] = asdict(capacity) if capacity is not None else None
    if cpu_path is not None:
        cpu_timing = time_frames(cpu_path(), plan.capacity_size, plan.cpu_ratio_frames)
        gpu_ms = next(row["latency_ms"] for row in result["sizes"] if row["size"] == cpu_timing["size"])
        result["cpu_latency_ms"] = cpu_timing["latency_ms"]
        result["gpu_cpu_speed_ratio"] = round(cpu_timing["latency_ms"] / gpu_ms, 2)
    return result


def bench_workload(
    backend: ComputeBackend,
    workload: Workload,
    plan: BenchPlan,
    workdir: Path,
    cpu_backend: ComputeBackend | None,
) -> dict[str, Any]:
    result: dict[str, Any] = {"workload": workload}
    built = build_synthetic_swapper(plan.swapper_width) if workload == "inswapper" else None
    swapper = load_swapper(backend, built, workdir) if built is not None else None
    if built is not None:
        result.update(parameters_m=built.parameters / 1e6, gflops_per_face=built.gflops_per_face)

    def cpu_path() -> TimedPath:
        assert cpu_backend is not None
        cpu_swapper = load_swapper(cpu_backend, built, workdir) if built is not None else None
        return FramePath(cpu_backend, workload, cpu_swapper)

    result.update(
        measure_path(
            FramePath(backend, workload, swapper), plan, cpu_path if cpu_backend is not None else None
        )
    )
    return result


def bench_daemon_path(backend: ComputeBackend, plan: BenchPlan, args: argparse.Namespace) -> dict[str, Any]:
    """The `daemon_mesh` workload (bench.daemon_path_bench): real models, the worker's conversions."""
    from bench.clients.frames import media_dir_from_args
    from bench.daemon_path_bench import DaemonPath
    from models.model_files import resolve_models_dir

    result: dict[str, Any] = {"workload": "daemon_mesh"}
    try:
        media_dir = media_dir_from_args(args)
        models_dir = resolve_models_dir(args.models_dir)
        path = DaemonPath.load(models_dir, media_dir, backend.execution_provider)
    except LivefuseError as reason:  # no models or photos here: the synthetic workloads still count
        logger.warning("daemon_mesh workload skipped: %s", reason)
        result["skipped"] = str(reason)
        return result
    result["frame_path"] = path.conversion.describe()

    def cpu_path() -> TimedPath:
        return DaemonPath.load(models_dir, media_dir, "cpu")

    result.update(measure_path(path, plan, cpu_path if backend.on_gpu else None))
    return result


def markdown_rows(report: dict[str, Any]) -> list[str]:
    """Rows for docs/benchmarks.md (one per workload and size)."""
    rows = [
        (
            "| date | machine | backend | workload | size | stages ms | added latency ms (p95) | fps | "
            f"streams held ({report['capacity_size']} 30 fps, p95 < 33 ms) | GPU/CPU |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload in report["workloads"]:
        for size in workload.get("sizes", []):  # a skipped workload has none
            stages = ", ".join(f"{name} {ms:.2f}" for name, ms in size["stages_ms"].items())
            ratio = workload.get("gpu_cpu_speed_ratio")
            rows.append(
                f"| {report['date']} | {report['machine']} | {report['backend']['array_backend']}+"
                f"{report['backend']['execution_provider']} | {workload['workload']} | {size['size']} | {stages} | "
                f"{size['latency_ms']:.2f} ({size['p95_latency_ms']:.2f}) | {size['fps']:.0f} | "
                f"{workload['streams_held']} | {'-' if ratio is None else f'{ratio:.1f}x'} |"
            )
    return rows


def machine_name(backend: ComputeBackend) -> str:
    if backend.on_gpu:
        cupy = require_cupy()
        return str(cupy.cuda.runtime.getDeviceProperties(backend.device_id)["name"].decode())
    return f"{platform.processor() or platform.machine()} CPU"


def run_gpu_bench(args: argparse.Namespace) -> int:
    requested: BackendRequest = "auto"
    if args.execution_provider in ("cuda", "tensorrt"):
        requested = args.execution_provider
    backend = choose_backend(requested, device_id=args.device_id)
    plan = QUICK_PLAN if args.quick else FULL_PLAN
    cpu_backend = choose_backend("cpu") if backend.on_gpu else None
    output_dir = Path(args.output_dir or "out/gpu_bench")
    output_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": machine_name(backend),
        "backend": backend.describe(),
        "quick": bool(args.quick),
        "capacity_size": "x".join(map(str, plan.capacity_size)),
        "workloads": [],
    }
    with tempfile.TemporaryDirectory(prefix="livefuse-gpu-bench-") as workdir:
        for workload in WORKLOADS:
            logger.info("gpu bench: %s on %s", workload, backend.describe()["array_backend"])
            report["workloads"].append(bench_workload(backend, workload, plan, Path(workdir), cpu_backend))
    report["workloads"].append(bench_daemon_path(backend, plan, args))
    rows = markdown_rows(report)
    (output_dir / "gpu_bench.json").write_text(json.dumps(report, indent=2))
    (output_dir / "gpu_bench.md").write_text("\n".join(rows) + "\n")
    sys.stdout.write("\n".join(rows) + "\n")
    return 0

"""`run_stream.py swap`: the real-time pipeline applied to an image or a video file.

Videos go through the same `FramePipeline` and per-stream tracking as a live call (one stream per file),
so what a user previews here is what the daemon does. The target's audio is copied packet for packet.
A video's progress is a bar on a terminal and a plain line every 5 s elsewhere (`ProgressBar`). A target
with no face is written unchanged with a WARNING naming it; a source with no face is an error naming the
file and what photo to use instead (exit code 2).
"""

import argparse
import logging
import time
from dataclasses import asdict
from fractions import Fraction
from pathlib import Path
from typing import cast

import av
import cv2
import numpy as np

from gpu_ops.errors import InvalidInputError
from models.downloader import ProgressBar
from models.face import Frame
from models.model_files import resolve_models_dir
from streamer.pipeline.config_args import config_from_args
from streamer.pipeline.frame_pipeline import Embedding, FrameJob, FramePipeline, SourceIdentity, StreamState
from streamer.pipeline.image_input import read_image_file, sniff_format
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings
from streamer.pipeline.swap_engines.base import NoFaceError

logger = logging.getLogger(__name__)

NO_SOURCE_FACE_FIX = "Use a photo where one face is clearly visible, facing the camera, and not cut off"
UNCHANGED = "so the output is the target unchanged"

IMAGE_SUFFIXES = {".jpg": ".jpg", ".jpeg": ".jpg", ".png": ".png", ".webp": ".webp"}
VIDEO_CODECS = {".mp4": "libx264", ".mkv": "libx264", ".mov": "libx264", ".webm": "libvpx"}


def is_image_file(path: Path) -> bool:
    """By content, so a video named .jpg (or an image named .bin) goes the right way."""
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError as error:
        raise InvalidInputError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        sniff_format(head)
    except InvalidInputError:
        return False
    return True


def write_image(path: Path, image: Frame) -> None:
    suffix = IMAGE_SUFFIXES.get(path.suffix.lower())
    if suffix is None:
        raise InvalidInputError(
            f"{path}: unknown image format {path.suffix!r}; use one of {sorted(IMAGE_SUFFIXES)}"
        )
    ok, data = cv2.imencode(suffix, cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    if not ok:
        raise InvalidInputError(f"{path}: could not encode the image")
    path.write_bytes(data.tobytes())


def swap_image(
    pipeline: FramePipeline,
    source: SourceIdentity,
    settings: SwapSettings,
    target: Path,
    reference: Embedding | None = None,
) -> Frame:
    """Detection on every call (no tracking cadence) for still images."""
    image = read_image_file(target)
    stream = pipeline.new_stream(reference_embedding=reference, detect_every=1)
    swapped = pipeline.process(FrameJob(image, stream, source, settings))
    if swapped is image or np.array_equal(swapped, image):
        logger.warning("%s: no face was detected, %s", target, UNCHANGED)
    return swapped


def _total_frames(video_in: av.VideoStream, rate: Fraction) -> int | None:
    """The stream's frame count, else one estimated from its duration (Matroska and WebM give none)."""
    if video_in.frames:
        return int(video_in.frames)
    if video_in.duration and video_in.time_base:
        return max(1, round(float(video_in.duration * video_in.time_base * rate)))
    return None


def _even(frame: Frame) -> Frame:
    height, width = frame.shape[:2]
    return frame[: height - height % 2, : width - width % 2]


def swap_video(
    pipeline: FramePipeline,
    source: SourceIdentity,
    settings: SwapSettings,
    target: Path,
    output: Path,
    reference: Embedding | None = None,
) -> int:
    """Decode, swap and encode every frame; copy the audio packets. Returns the number of frames."""
    codec = VIDEO_CODECS.get(output.suffix.lower())
    if codec is None:
        raise InvalidInputError(
            f"{output}: unknown video format {output.suffix!r}; use one of {sorted(VIDEO_CODECS)}"
        )
    try:
        container_in = av.open(str(target))
    except (av.error.FFmpegError, OSError) as error:
        raise InvalidInputError(f"{target}: not a readable image or video ({error})") from None
    with container_in:
        if not container_in.streams.video:
            raise InvalidInputError(f"{target}: no video stream")
        video_in = container_in.streams.video[0]
        video_in.thread_type = "AUTO"
        audio_in = container_in.streams.audio[0] if container_in.streams.audio else None
        stream = pipeline.new_stream(reference_embedding=reference)
        rate = video_in.average_rate or Fraction(30, 1)
        frames = 0
        partial = output.with_name(output.stem + ".partial" + output.suffix)
        progress = ProgressBar(f"swap {target.name}", unit="frames")
        total_frames = _total_frames(video_in, rate)
        frames_with_faces = 0
        try:
            with av.open(str(partial), "w", format=_container_format(output)) as container_out:
                video_out = cast(av.VideoStream, container_out.add_stream(codec, rate=rate))
                video_out.pix_fmt = "yuv420p"
                # the header (and so every codec) is written at the first mux: size must be known now
                video_out.width = video_in.codec_context.width // 2 * 2
                video_out.height = video_in.codec_context.height // 2 * 2
                if codec == "libx264":
                    video_out.options = {"crf": "18", "preset": "veryfast"}
                audio_out = container_out.add_stream_from_template(audio_in) if audio_in is not None else None
                demux = [video_in] + ([audio_in] if audio_in is not None else [])
                for packet in container_in.demux(*demux):
                    if packet.stream is audio_in and audio_out is not None:
                        if packet.dts is None:
                            continue
                        packet.stream = audio_out
                        container_out.mux(packet)
                        continue
                    try:
                        decoded = packet.decode()
                    except av.error.InvalidDataError as error:
                        logger.warning("skipping an undecodable video packet: %s", error)
                        continue
                    for video_frame in decoded:
                        if not isinstance(video_frame, av.VideoFrame):
                            continue
                        frames += 1
                        rgb, swapped = _swap_frame(pipeline, stream, source, settings, video_frame)
                        frames_with_faces += swapped is not rgb
                        out_frame = av.VideoFrame.from_ndarray(swapped, format="rgb24")
                        out_frame.pts = video_frame.pts
                        out_frame.time_base = video_frame.time_base
                        container_out.mux(video_out.encode(out_frame))
                        progress.update(frames, max(total_frames or 0, frames) or None)
                if frames == 0:
                    raise InvalidInputError(f"{target}: the video has no decodable frames")
                container_out.mux(video_out.encode(None))
            progress.finish(frames, frames)
            partial.replace(output)
        finally:
            partial.unlink(missing_ok=True)
    if frames_with_faces == 0:
        logger.warning("%s: no face was detected in any of its %d frames, %s", target, frames, UNCHANGED)
    elif frames_with_faces < frames:
        logger.info("faces swapped in %d of the %d frames of %s", frames_with_faces, frames, target)
    return frames


def _swap_frame(
    pipeline: FramePipeline,
    stream: StreamState,
    source: SourceIdentity,
    settings: SwapSettings,
    video_frame: av.VideoFrame,
) -> tuple[Frame, Frame]:
    """The frame as decoded and as swapped (the same object when no face was swapped)."""
    rgb = np.ascontiguousarray(_even(np.ascontiguousarray(video_frame.to_ndarray(format="rgb24"))))
    return rgb, pipeline.process(FrameJob(rgb, stream, source, settings))


def _container_format(output: Path) -> str | None:
    return {".mkv": "matroska", ".mov": "mov", ".webm": "webm", ".mp4": "mp4"}.get(output.suffix.lower())


def run(args: argparse.Namespace) -> int:
    source_path, target, output = Path(args.source), Path(args.target), Path(args.output)
    if args.face_selector == "reference" and not args.reference_face:
        raise InvalidInputError("--face-selector reference needs --reference-face IMAGE")
    source_image = read_image_file(source_path)
    target_is_image = is_image_file(target)
    if not output.parent.exists():
        raise InvalidInputError(f"{output.parent}: output directory does not exist")
    pipeline = FramePipeline.load(resolve_models_dir(args.models_dir), config_from_args(PipelineConfig, args))
    settings = config_from_args(SwapSettings, args)
    refusal = pipeline.capabilities().refusal(asdict(settings))
    if refusal is not None:  # e.g. --enhancer without GFPGAN: refused, not silently left out of the output
        raise InvalidInputError(f"the flags ask for what this installation cannot run: {refusal}")
    try:
        source = pipeline.prepare_source(source_image, settings)
    except NoFaceError as error:
        raise NoFaceError(f"{source_path}: {error}. {NO_SOURCE_FACE_FIX}") from None
    reference = None
    if settings.face_selector == "reference":
        try:
            reference = pipeline.reference_embedding(read_image_file(args.reference_face))
        except NoFaceError as error:
            raise NoFaceError(f"{args.reference_face}: {error}") from None
    started = time.perf_counter()
    if target_is_image:
        write_image(output, swap_image(pipeline, source, settings, target, reference))
        logger.info("wrote %s in %.0f ms", output, (time.perf_counter() - started) * 1000)
        return 0
    frames = swap_video(pipeline, source, settings, target, output, reference)
    elapsed = time.perf_counter() - started
    logger.info(
        "wrote %s: %d frames in %.1f s (%.1f fps)", output, frames, elapsed, frames / max(elapsed, 1e-9)
    )
    return 0

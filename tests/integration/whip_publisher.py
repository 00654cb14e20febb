"""A WHIP publisher that is not aiortc: FFmpeg's `whip` muxer from the PyAV wheel, run in its own process.

    python -m tests.integration.whip_publisher --url http://127.0.0.1:PORT/whip --photo fr_obama.jpg \
        --media-dir ../shared/media --seconds 20

Publishes H264 (x264 baseline, no B-frames, a keyframe every second) and Opus (a 440 Hz tone) made from a
photo panned like a handheld camera, or from a video clip (looped), paced in real time. DTLS needs an
ECDSA P-256 certificate: one is generated into a temporary folder and passed as `cert_file`/`key_file`.
The muxer sends DELETE to the Location when the container closes (end of --seconds or SIGTERM).
The published frames are also written to --frames-out (.npy, [N,H,W,3] RGB) for the test to compare.
"""

import argparse
import fractions
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import av
import cv2
import numpy as np

from bench.clients.frames import panning_face_frames
from models.face import Frame
from tests.certificates import write_self_signed

logger = logging.getLogger(__name__)

AUDIO_RATE = 48000
AUDIO_FRAME_SAMPLES = 960  # 20 ms
TONE_HZ = 440.0
PAN_FRAMES = 90


def photo_frames(path: Path, width: int, height: int) -> list[Frame]:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise SystemExit(f"cannot read {path}")
    rgb = np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), dtype=np.uint8)
    return panning_face_frames(rgb, width, height, PAN_FRAMES)


def clip_frames(path: Path, width: int, height: int) -> list[Frame]:
    with av.open(str(path)) as clip:
        return [
            np.ascontiguousarray(frame.to_ndarray(width=width, height=height, format="rgb24"))
            for frame in clip.decode(video=0)
        ]


def looped(frames: list[Frame]) -> Iterator[Frame]:
    while True:
        yield from frames


def publish(url: str, frames: list[Frame], fps: int, seconds: float, token: str | None) -> int:
    """Publish until `seconds` pass or SIGTERM; returns the number of video frames sent."""
    stop = False

    def on_signal(signal_number: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    height, width = frames[0].shape[:2]
    with tempfile.TemporaryDirectory() as folder:
        cert_file, key_file = write_self_signed(Path(folder))
        options = {"cert_file": str(cert_file), "key_file": str(key_file), "handshake_timeout": "10000"}
        if token:
            options["authorization"] = token
        container = av.open(url, "w", format="whip", options=options)
        try:
            video = container.add_stream("libx264", rate=fps)
            video.width, video.height, video.pix_fmt = width, height, "yuv420p"
            video.codec_context.profile = "Baseline"
            video.codec_context.options = {"preset": "ultrafast", "tune": "zerolatency", "bf": "0"}
            video.codec_context.gop_size = fps
            audio = container.add_stream("libopus", rate=AUDIO_RATE, layout="stereo")
            sent = _send(container, video, audio, looped(frames), fps, seconds, lambda: stop)
        finally:
            container.close()  # the muxer sends DELETE to the WHIP resource here
    return sent


def _send(
    container: av.container.OutputContainer,
    video: av.VideoStream,
    audio: av.AudioStream,
    frames: Iterator[Frame],
    fps: int,
    seconds: float,
    stopped: object,
) -> int:
    started = time.monotonic()
    audio_samples = 0
    index = 0
    while time.monotonic() - started < seconds and not stopped():  # type: ignore[operator]
        due = started + index / fps
        time.sleep(max(0.0, due - time.monotonic()))
        frame = av.VideoFrame.from_ndarray(next(frames), format="rgb24").reformat(format="yuv420p")
        frame.pts, frame.time_base = index, fractions.Fraction(1, fps)
        container.mux(video.encode(frame))
        index += 1
        while audio_samples < index * AUDIO_RATE / fps:
            container.mux(audio.encode(_tone(audio_samples)))
            audio_samples += AUDIO_FRAME_SAMPLES
    return index


def _tone(first_sample: int) -> av.AudioFrame:
    times = (first_sample + np.arange(AUDIO_FRAME_SAMPLES)) / AUDIO_RATE
    mono = (0.2 * 32767 * np.sin(2 * np.pi * TONE_HZ * times)).astype(np.int16)
    frame = av.AudioFrame.from_ndarray(np.repeat(mono[None, :], 2, axis=1), format="s16", layout="stereo")
    frame.sample_rate = AUDIO_RATE
    frame.pts, frame.time_base = first_sample, fractions.Fraction(1, AUDIO_RATE)
    return frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the WHIP endpoint, e.g. http://127.0.0.1:8080/whip")
    parser.add_argument("--media-dir", required=True, type=Path)
    parser.add_argument("--photo", help="photo to pan (e.g. fr_obama.jpg)")
    parser.add_argument("--clip", help="video clip to loop (e.g. fr_short_hamilton_clip.mp4)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--token", help="bearer token for the WHIP endpoint")
    parser.add_argument("--frames-out", type=Path, help="write the distinct published frames here (.npy)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.clip:
        frames = clip_frames(args.media_dir / args.clip, args.width, args.height)
    else:
        frames = photo_frames(args.media_dir / (args.photo or "fr_obama.jpg"), args.width, args.height)
    if args.frames_out is not None:
        np.save(args.frames_out, np.stack(frames))
    sent = publish(args.url, frames, args.fps, args.seconds, args.token)
    logger.info("published %d video frames", sent)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""livefuse entry point: argument parsing, logging set-up, dispatch. Nothing else lives here.

Each subcommand's work is a `run(args) -> int` function in its own package; this file is the only place
that turns LivefuseError into a one-line message and an exit code. It is over 400 lines because every
flag of every subcommand is defined here, each with its help: one parser that `--help`, the docs and
tests/unit/test_run_stream.py (every flag reaches what it sets) all read.
"""

import argparse
import importlib
import logging
import sys
from collections.abc import Callable
from typing import NoReturn

# both cheap (no aiortc, no onnxruntime): every subcommand's parser is built from them
from streamer.pipeline.choices import (
    BACKEND_REQUESTS,
    ENGINE_CHOICES,
    FACE_SELECTOR_MODES,
    FRAME_PATH_CHOICES,
    model_names,
)
from streamer.realtime.micro_batcher import DEFAULT_MAX_WAIT_MS

# subcommand -> module whose `run(args) -> int` does the work (imported lazily: `models list` must not
# pay for aiortc, and `swap` must not need a web stack)
COMMANDS: dict[str, str] = {
    "serve": "web.serve",
    "room": "web.room_command",
    "camera": "streamer.outputs.camera",
    "swap": "streamer.outputs.file_swap",
    "models": "models.commands",
    "bench": "bench.command",
}

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
MAX_PORT = 65535


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` shows each flag's default, except where there is none to show (None, off, empty) or the
    help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, [], argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action) or text


class _Parser(argparse.ArgumentParser):
    """Every mistake on the command line is one line naming the flag and the fix, exit code 2: no usage
    dump (`--help` has it)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> "NoReturn":
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def port_number(text: str) -> int:
    """`--port`: an integer 0..65535 (0: any free port), checked before anything starts."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number; use 1-{MAX_PORT}") from None
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{port} is not a port; use 1-{MAX_PORT} (0: any free port)")
    return port


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models-dir", help="directory with model files (else $LIVEFUSE_MODELS, else cache)")
    parser.add_argument(
        "--execution-provider",
        choices=BACKEND_REQUESTS,
        default="auto",
        help="ONNX Runtime provider (auto: CuPy + CUDA when both work, else the CPU; the log says why)",
    )
    parser.add_argument("--device-id", type=int, default=0, help="GPU index for cuda/tensorrt")
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        default=0,
        help="ONNX Runtime threads per model (0: 1 up to 4 cores, else a quarter of them; never spinning)",
    )


def add_swap_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=ENGINE_CHOICES,
        default="auto",
        help="swap engine (auto: inswapper when its files verify, else mesh)",
    )
    parser.add_argument(
        "--swapper-model",
        choices=model_names("swapper"),
        default="inswapper_128",
        help="swapper file of the inswapper engine",
    )
    parser.add_argument(
        "--detector", choices=model_names("detector"), default="yunet_n", help="face detector model"
    )
    parser.add_argument(
        "--face-selector",
        choices=FACE_SELECTOR_MODES,
        default="many",
        help="which faces to swap: all, the largest, or those like --reference-face",
    )
    parser.add_argument("--reference-face", help="image of the face to swap (with --face-selector reference)")
    parser.add_argument(
        "--reference-distance", type=float, default=0.6, help="max dlib distance to the reference"
    )
    parser.add_argument("--enhancer", action="store_true", help="run GFPGAN 1.4 on swapped faces")
    parser.add_argument("--no-mouth-mask", action="store_true", help="do not keep the target's inner mouth")
    parser.add_argument("--no-occlusion", action="store_true", help="paste over what is in front of a face")


def add_hardening_options(parser: argparse.ArgumentParser) -> None:
    """Access, limits, provenance and shutdown flags of `serve` (docs/security.md)."""
    parser.add_argument("--token", help="require 'Authorization: Bearer TOKEN' (else $LIVEFUSE_TOKEN)")
    parser.add_argument(
        "--cors-origin", action="append", default=[], help="allow this exact origin (repeatable)"
    )
    parser.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    parser.add_argument("--tls-key", help="PEM private key for --tls-cert")
    parser.add_argument("--idle-timeout", type=float, default=5.0, help="close sessions without video (s)")
    parser.add_argument(
        "--rate-limit", type=float, default=60.0, help="session creations per minute per client (0: off)"
    )
    parser.add_argument("--label", help='visible label on swapped frames, e.g. "AI" (bottom-right)')
    parser.add_argument("--max-upload-mb", type=float, default=20.0, help="source image file size cap")
    parser.add_argument(
        "--max-upload-megapixels", type=float, default=40.0, help="source image pixel cap (declared)"
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=10.0, help="SIGTERM: close open sessions within (s)"
    )


def add_network_options(parser: argparse.ArgumentParser) -> None:
    """NAT traversal and routing flags of `serve` (docs/deploy.md); each falls back to its variable and is
    checked in web/network_config.py."""
    parser.add_argument(
        "--ice-servers",
        metavar="URLS",
        help="comma-separated stun:/turn:/turns: URLs for the daemon's peers and its clients "
        "(else $LIVEFUSE_ICE_SERVERS)",
    )
    parser.add_argument(
        "--turn-secret",
        help="coturn's static-auth-secret: short-lived TURN credentials per client "
        "(else $LIVEFUSE_TURN_SECRET, which keeps it out of `ps`)",
    )
    parser.add_argument(
        "--turn-ttl",
        metavar="SECONDS",
        help="how long each TURN credential is valid for new allocations "
        "(default 3600; else $LIVEFUSE_TURN_TTL)",
    )
    parser.add_argument(
        "--ice-port-range",
        metavar="MIN-MAX",
        help="UDP ports of the daemon's host candidates, e.g. 50000-50099 (else $LIVEFUSE_ICE_PORT_RANGE)",
    )
    parser.add_argument(
        "--public-address",
        metavar="IP",
        help="address shown in host candidates behind 1:1 NAT (else $LIVEFUSE_PUBLIC_ADDRESS)",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="this daemon's external base URL: Location headers point there, so a call's later requests "
        "reach this daemon behind a proxy (else $LIVEFUSE_PUBLIC_URL)",
    )
    parser.add_argument(
        "--trusted-proxies",
        metavar="CIDR[,CIDR]",
        help="proxies whose X-Forwarded-For / Forwarded headers name the client for the rate limit and "
        "the audit log; from any other peer those headers are ignored (else $LIVEFUSE_TRUSTED_PROXIES)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="run_stream.py", description="livefuse: real-time face swap")
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="log threshold"
    )
    parser.add_argument(
        "--log-format", default=None, choices=("json", "text"), help="default: json for serve"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the WebRTC daemon")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface; see --token)"
    )
    serve.add_argument("--port", type=port_number, default=8080, help="TCP port of the page and the API")
    serve.add_argument("--max-sessions", type=int, default=8, help="calls at once; more are answered 503")
    serve.add_argument(
        "--ice-address",
        action="append",
        default=[],
        help="host address offered as ICE candidate (repeatable)",
    )
    serve.add_argument(
        "--source", help="face image set as the source of every WHIP stream (no REST call needed)"
    )
    serve.add_argument(
        "--batch-wait-ms",
        type=float,
        default=DEFAULT_MAX_WAIT_MS,
        help="how long a frame may wait for other sessions' frames to share its batch (ms; GPU: on the "
        "CPU every frame is its own batch)",
    )
    serve.add_argument(
        "--frame-path",
        choices=FRAME_PATH_CHOICES,
        default="auto",
        help="where frames are converted: auto = device (planes up once, down once) on the GPU backend, "
        "host (libswscale) on the CPU; device on a CPU runs the GPU path's NumPy mirrors",
    )
    add_hardening_options(serve)
    add_network_options(serve)
    add_model_options(serve)
    add_swap_options(serve)

    room = sub.add_parser("room", help="swap one feed of a Janus VideoRoom and publish it into the room")
    room.add_argument(
        "--janus", required=True, metavar="URL", help="Janus HTTP API, e.g. http://host:8088/janus"
    )
    room.add_argument("--room", required=True, type=int, help="VideoRoom room number")
    feed = room.add_mutually_exclusive_group(required=True)
    feed.add_argument("--feed", type=int, help="the publisher's feed id")
    feed.add_argument("--display", help="the publisher's display name (followed when its id changes)")
    # its own dest: `serve --source` (DaemonConfig.default_source, for WHIP streams) is another thing
    room.add_argument("--source", dest="room_source", required=True, help="source face image")
    room.add_argument("--pin", help="the room's pin (else $LIVEFUSE_ROOM_PIN)")
    room.add_argument("--secret", help="Janus's API secret (else $LIVEFUSE_JANUS_SECRET)")
    room.add_argument("--janus-token", help="a Janus API token (else $LIVEFUSE_JANUS_TOKEN)")
    room.add_argument("--max-sessions", type=int, default=8)
    room.add_argument(
        "--ice-address",
        action="append",
        default=[],
        help="host address offered as ICE candidate (repeatable)",
    )
    room.add_argument("--label", help='visible label on swapped frames, e.g. "AI" (bottom-right)')
    room.add_argument("--idle-timeout", type=float, default=5.0, help="leave a feed without video (s)")
    add_network_options(room)
    add_model_options(room)
    add_swap_options(room)

    camera = sub.add_parser("camera", help="local camera -> swap -> virtual camera")
    camera.add_argument("--device", required=True, help="camera device (or a video file, looped)")
    camera.add_argument("--source", required=True, help="source face image")
    camera.add_argument(
        "--virtual-cam", action="store_true", help="send the swapped video to a virtual camera"
    )
    camera.add_argument("--preview", action="store_true", help="show the swapped video in a window")
    camera.add_argument("--width", type=int, default=1280, help="capture width (px)")
    camera.add_argument("--height", type=int, default=720, help="capture height (px)")
    camera.add_argument("--fps", type=int, default=30, help="capture frame rate")
    camera.add_argument("--virtual-cam-backend", help="pyvirtualcam backend (default: the system's)")
    camera.add_argument("--virtual-cam-device", help="e.g. /dev/video10 (default: first loopback device)")
    camera.add_argument("--frames", type=int, default=None, help="stop after N frames out (tests)")
    add_model_options(camera)
    add_swap_options(camera)

    swap = sub.add_parser("swap", help="swap faces in an image or a video file")
    swap.add_argument("--source", required=True, help="source face image")
    swap.add_argument("--target", required=True, help="target image or video")
    swap.add_argument("--output", required=True, help="output image or video")
    add_model_options(swap)
    add_swap_options(swap)

    models = sub.add_parser("models", help="list, verify or fetch model files")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    models_list = models_sub.add_parser("list", help="known models and whether their files are present")
    verify = models_sub.add_parser("verify", help="check sha256 of present model files")
    verify.add_argument("names", nargs="*", help="model names (default: all present)")
    fetch = models_sub.add_parser("fetch", help="download a model (resumes, verifies)")
    fetch.add_argument("names", nargs="+", help="model names")
    fetch.add_argument("--url", help="download from this URL instead of the registry's")
    fetch.add_argument(
        "--stall-timeout", type=float, help="seconds without data before giving up (default 30)"
    )
    pin = models_sub.add_parser(
        "pin", help="record the sha256 of a copied-in model that has no registered hash"
    )
    pin.add_argument("names", nargs="+", help="model names")
    models_dir_help = "directory with model files (else $LIVEFUSE_MODELS, else cache)"
    models.add_argument("--models-dir", help=models_dir_help)
    for p in (
        models_list,
        verify,
        fetch,
        pin,
    ):  # SUPPRESS: an absent flag must not clobber `models --models-dir`
        p.add_argument("--models-dir", default=argparse.SUPPRESS, help=models_dir_help)

    bench = sub.add_parser("bench", help="measure per-stage timings and latency")
    bench.add_argument("--live", action="store_true", help="loopback WebRTC glass-to-glass latency")
    bench.add_argument("--whip", action="store_true", help="WHIP publish -> swap -> WHEP receive latency")
    bench.add_argument(
        "--room",
        action="store_true",
        help="latency a Janus room job adds against a direct call (root, janus)",
    )
    bench.add_argument("--soak", action="store_true", help="10 minute multi-session soak")
    bench.add_argument("--gpu", action="store_true", help="frame path on the GPU backend, stage by stage")
    bench.add_argument("--quick", action="store_true", help="with --gpu: small sizes and model (CPU check)")
    bench.add_argument("--output-dir", help="with --gpu: folder for gpu_bench.json and gpu_bench.md")
    bench.add_argument("--seconds", type=float, default=None, help="duration override")
    bench.add_argument("--frames", type=int, default=200, help="frames per measurement")
    bench.add_argument(
        "--streams", type=int, default=1, help="N > 1: N streams batched vs one call each (ms per frame)"
    )
    bench.add_argument(
        "--rounds", type=int, default=2, help="with --streams or --baseline: alternating rounds per mode"
    )
    bench.add_argument("--calls", type=int, default=1, help="with --live: this many calls at once")
    bench.add_argument(
        "--baseline",
        help="with --live: a git revision whose daemon runs in alternating rounds with this one (A/B)",
    )
    bench.add_argument("--loss", type=float, default=0.0, help="with --live: drop this share of datagrams")
    bench.add_argument("--cut", type=float, default=0.0, help="with --live: cut the path for this long (s)")
    bench.add_argument("--cap-kbps", type=float, default=None, help="with --live: bandwidth cap each way")
    bench.add_argument("--width", type=int, default=640, help="frame width (px)")
    bench.add_argument("--height", type=int, default=480, help="frame height (px)")
    bench.add_argument(
        "--face-size",
        type=float,
        default=None,
        help="share of the frame's width the face takes, 0.02-0.9 (default a third, the frames of old)",
    )
    bench.add_argument("--media-dir", help="directory with face photos to use as frames and sources")
    bench.add_argument("--output", help="also write the results as JSON to this file")
    add_model_options(bench)
    add_swap_options(bench)
    return parser


class _JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra=` fields (session_id, event, latency_ms...) become keys."""

    _STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        import json

        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for noisy in ("aioice", "aiortc", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def check_models_dir(args: argparse.Namespace) -> None:
    """A models directory the user named (`--models-dir`, $LIVEFUSE_MODELS) must exist before any command
    reads it, or the bundled default models would be used in silence; `models fetch` creates it."""
    if not hasattr(args, "models_dir") or getattr(args, "models_command", None) == "fetch":
        return
    from models.model_files import resolve_models_dir

    resolve_models_dir(args.models_dir, must_exist=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format or ("json" if args.command == "serve" else "text"))
    from gpu_ops.errors import LivefuseError

    run: Callable[[argparse.Namespace], int] = importlib.import_module(COMMANDS[args.command]).run
    try:
        check_models_dir(args)
        return run(args)
    except LivefuseError as error:
        sys.stderr.write(f"error: {error}\n")
        return getattr(error, "exit_code", EXIT_ERROR)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

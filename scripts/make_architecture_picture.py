"""Regenerate docs/images/architecture.svg from the code's own module list: a frame's path with the module
that owns each stage, beside the rooms (packages) and the imports between them.

Each stage names `module:Symbol`; the picture is refused when a module or symbol no longer exists, and
tests/structure/test_architecture_picture.py fails when the committed SVG differs from what this makes,
so the picture cannot drift from the code.

    python scripts/make_architecture_picture.py [--output docs/images/architecture.svg]
"""

import argparse
import ast
import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.structure.import_graph import collapse, import_graph, parse_module, project_modules

OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "images" / "architecture.svg"


@dataclass(frozen=True)
class Stage:
    what: str  # what happens to the frame
    owner: str  # "module:Symbol" (or "module") that does it
    thread: str  # where it runs


# A frame's path through the daemon, top to bottom (DESIGN.md section 2, docs/architecture.md).
FRAME_PATH: tuple[Stage, ...] = (
    Stage("offer/answer (browser), WHIP (OBS)", "web.signaling:add_routes", "event loop"),
    Stage("decode RTP -> av.VideoFrame", "streamer.transport.jitter_marker:remove_frame_on_marker", "aiortc"),
    Stage("read the newest frame", "streamer.realtime.peer_session:PeerSession", "event loop"),
    Stage(
        "swap every frame, or 3 of 4 .. 1 of 6 under load",
        "streamer.realtime.swap_cadence:SwapCadence",
        "event loop",
    ),
    Stage("one slot, newest wins", "streamer.realtime.mailbox:FrameMailbox", "loop -> worker"),
    Stage("close a batch over sessions", "streamer.realtime.micro_batcher:MicroBatcher", "worker"),
    Stage("I420 -> RGB (host or device)", "streamer.realtime.frame_conversion:FrameConversion", "worker"),
    Stage("mesh, smooth; detect when unsure", "streamer.pipeline.face_tracker:FaceTracker", "worker"),
    Stage("select faces", "streamer.pipeline.face_selector:select_faces", "worker"),
    Stage("swap (mesh | inswapper)", "streamer.pipeline.frame_pipeline:FramePipeline", "worker"),
    Stage("label swapped video", "streamer.outputs.provenance:draw_label", "worker"),
    Stage("RGB -> I420", "streamer.realtime.frame_conversion:FrameConversion", "worker"),
    Stage(
        "one slot to the encoder, newest wins", "streamer.realtime.outbound_track:OutboundTrack", "event loop"
    ),
    Stage("encode + RTP (x264/VP8 tuned)", "streamer.transport.codec_tuning:get_tuned_encoder", "aiortc"),
    Stage("WHEP viewers, viewer page", "streamer.realtime.session_outputs:SessionOutputs", "event loop"),
)

# The rooms, top layer first: every import arrow points down this list.
ROOMS: tuple[str, ...] = (
    "bench",
    "web",
    "streamer.sfu",
    "streamer.realtime",
    "streamer.outputs",
    "streamer.pipeline",
    "streamer.transport",
    "models",
    "gpu_ops",
)


def _room(module: str) -> str | None:
    for room in ROOMS:
        if module == room or module.startswith(room + "."):
            return room
    return None


def check_stages(modules: dict[str, Path]) -> None:
    """Every stage's owner exists: the module, and the symbol at its top level."""
    for stage in FRAME_PATH:
        module, _, symbol = stage.owner.partition(":")
        if module not in modules:
            raise SystemExit(f"stage {stage.what!r}: no module {module}")
        if symbol:
            tree = parse_module(modules[module])
            names = {
                node.name
                for node in tree.body
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            }
            names |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                      if isinstance(t, ast.Name)}  # fmt: skip
            if symbol not in names:
                raise SystemExit(f"stage {stage.what!r}: {module} has no {symbol}")


def room_edges(modules: dict[str, Path]) -> list[tuple[str, str]]:
    graph = import_graph(modules)
    merged: dict[str, set[str]] = {}
    for source, targets in collapse(graph, 3).items():
        for target in targets:
            a, b = _room(source), _room(target)
            if a and b and a != b:
                merged.setdefault(a, set()).add(b)
    return sorted((a, b) for a, targets in merged.items() for b in targets)


def room_sizes(modules: dict[str, Path]) -> dict[str, int]:
    """room -> how many modules it holds (not lines: an edit elsewhere must not stale the picture)."""
    sizes: dict[str, int] = {}
    for name in modules:
        room = _room(name)
        if room is not None:
            sizes[room] = sizes.get(room, 0) + 1
    return sizes


STAGE_X, STAGE_W, STAGE_H, STAGE_GAP, TOP = 20, 560, 40, 12, 60
ROOM_X, ROOM_W, ROOM_H = 660, 230, 50
THREAD_COLOURS = {
    "event loop": "#dbeafe",
    "worker": "#fde68a",
    "aiortc": "#e5e7eb",
    "loop -> worker": "#d1fae5",
}


def render_svg() -> str:
    modules = project_modules()
    check_stages(modules)
    edges = room_edges(modules)
    sizes = room_sizes(modules)
    height = TOP + len(FRAME_PATH) * (STAGE_H + STAGE_GAP) + 60
    room_gap = (height - TOP - 60 - len(ROOMS) * ROOM_H) / (len(ROOMS) - 1)
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="1160" height="{height}" '
            f'viewBox="0 0 1160 {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="13">'
        ),
        (
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#374151"/></marker></defs>'
        ),
        '<rect width="100%" height="100%" fill="white"/>',
        (
            f'<text x="{STAGE_X}" y="30" font-size="17" font-weight="bold">One frame, top to bottom: '
            "stage, owning module, thread</text>"
        ),
        f'<text x="{ROOM_X}" y="30" font-size="17" font-weight="bold">Rooms and their imports</text>',
    ]
    y = TOP
    for index, stage in enumerate(FRAME_PATH):
        colour = THREAD_COLOURS[stage.thread]
        out.append(
            f'<rect x="{STAGE_X}" y="{y}" width="{STAGE_W}" height="{STAGE_H}" rx="6" fill="{colour}" '
            'stroke="#374151"/>'
        )
        out.append(f'<text x="{STAGE_X + 10}" y="{y + 17}" font-weight="bold">{escape(stage.what)}</text>')
        out.append(
            f'<text x="{STAGE_X + 10}" y="{y + 33}" font-family="DejaVu Sans Mono, monospace" font-size="11.5">'
            f"{escape(stage.owner)}</text>"
        )
        out.append(
            f'<text x="{STAGE_X + STAGE_W - 10}" y="{y + 17}" text-anchor="end" font-size="11" '
            f'fill="#374151">{escape(stage.thread)}</text>'
        )
        if index + 1 < len(FRAME_PATH):
            x = STAGE_X + STAGE_W // 2
            out.append(
                f'<line x1="{x}" y1="{y + STAGE_H}" x2="{x}" y2="{y + STAGE_H + STAGE_GAP}" '
                'stroke="#374151" marker-end="url(#arrow)"/>'
            )
        y += STAGE_H + STAGE_GAP
    legend_y = y + 20
    legend_x = STAGE_X
    for thread, colour in THREAD_COLOURS.items():
        out.append(
            f'<rect x="{legend_x}" y="{legend_y - 12}" width="14" height="14" fill="{colour}" stroke="#374151"/>'
        )
        out.append(f'<text x="{legend_x + 20}" y="{legend_y}">{escape(thread)}</text>')
        legend_x += 40 + 8 * len(thread)

    centre: dict[str, float] = {}
    for index, room in enumerate(ROOMS):
        top = TOP + index * (ROOM_H + room_gap)
        centre[room] = top + ROOM_H / 2
        count = sizes.get(room, 0)
        out.append(
            f'<rect x="{ROOM_X}" y="{top:.1f}" width="{ROOM_W}" height="{ROOM_H}" rx="6" fill="#f3f4f6" '
            'stroke="#111827"/>'
        )
        out.append(
            f'<text x="{ROOM_X + 10}" y="{top + 21:.1f}" font-weight="bold" '
            f'font-family="DejaVu Sans Mono, monospace">{escape(room)}</text>'
        )
        out.append(f'<text x="{ROOM_X + 10}" y="{top + 40:.1f}" font-size="11">{count} modules</text>')
    for number, (source, target) in enumerate(edges):
        span = ROOMS.index(target) - ROOMS.index(source)
        x = ROOM_X + ROOM_W
        bend = x + 12 + 11 * span + 3 * (number % 4)
        y1, y2 = centre[source] + 6, centre[target] - 6
        colour = "#b91c1c" if span < 0 else "#374151"  # an upward arrow would show red (the tests forbid it)
        out.append(
            f'<path d="M {x} {y1:.1f} C {bend} {y1:.1f}, {bend} {y2:.1f}, {x} {y2:.1f}" fill="none" '
            f'stroke="{colour}" stroke-width="1.1" marker-end="url(#arrow)"/>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    args.output.write_text(render_svg())
    return 0


if __name__ == "__main__":
    sys.exit(main())

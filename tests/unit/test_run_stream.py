"""The command line: every flag of every subcommand reaches what it sets (a config field through
`config_from_args`, or the command itself), absent flags build the configs' own defaults, the choices
come from the code's Literals, and `bench` hands its model and swap flags on to the daemon it starts."""

import argparse
from pathlib import Path

import pytest

from bench.live_bench import DAEMON_FLAGS, daemon_args
from run_stream import build_parser
from streamer.pipeline.choices import (
    BACKEND_REQUESTS,
    ENGINE_CHOICES,
    FACE_SELECTOR_MODES,
    FRAME_PATH_CHOICES,
    model_names,
)
from streamer.pipeline.config_args import arg_sources, config_from_args
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings
from web.daemon_config import DaemonConfig

PIPELINE = (PipelineConfig, SwapSettings)
CONFIGS: dict[str, tuple[type, ...]] = {
    "serve": (*PIPELINE, DaemonConfig),
    "camera": PIPELINE,
    "swap": PIPELINE,
    "bench": PIPELINE,
    "room": (*PIPELINE, DaemonConfig),
}
# what each command reads itself, not through a config (the help text names where it goes)
OWN: dict[str, set[str]] = {
    "serve": {"host", "port", "tls_cert", "tls_key", "models_dir"},
    "camera": {
        "device", "source", "virtual_cam", "preview", "width", "height", "fps", "virtual_cam_backend",
        "virtual_cam_device", "frames", "models_dir", "reference_face",
    },
    "swap": {"source", "target", "output", "models_dir", "reference_face"},
    "bench": {
        "live", "whip", "room", "soak", "gpu", "quick", "output_dir", "seconds", "frames", "streams", "rounds",
        "calls", "baseline", "width", "height", "face_size", "media_dir", "output", "models_dir",
        "reference_face", "loss", "cut", "cap_kbps",
    },
    "room": {"janus", "room", "feed", "display", "room_source", "pin", "secret", "janus_token", "models_dir"},
}  # fmt: skip
# DaemonConfig's defaults are the library's (tests, in-process apps); where `serve` chooses otherwise
SERVE_DEFAULTS_DIFFER = {"rate_limit_per_minute": 60.0}


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    path = tmp_path / "face.jpg"
    path.write_bytes(b"\xff\xd8 not decoded by the config, only checked to exist")
    return path


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return choices[command]


def _actions(command: str) -> list[argparse.Action]:
    return [action for action in _subparser(command)._actions if action.dest != "help"]


def _required(command: str, photo: Path) -> list[str]:
    return {
        "camera": ["--device", str(photo), "--source", str(photo)],
        "swap": ["--source", str(photo), "--target", str(photo), "--output", "out.jpg"],
        "room": [
            "--janus",
            "http://127.0.0.2:8088/janus",
            "--room",
            "1",
            "--feed",
            "1",
            "--source",
            str(photo),
        ],
    }.get(command, [])


SAMPLES = {  # a valid non-default value for flags whose values are checked
    "ice_address": ["127.0.0.2"],
    "cors_origin": ["https://a.example"],
    "label": ["AI"],
    "token": ["a-token"],
    "ice_servers": ["stun:127.0.0.1:3478"],
    "turn_secret": ["the-second-secret-of-16"],
    "turn_ttl": ["60"],
    "ice_port_range": ["50000-50099"],
    "public_address": ["203.0.113.7"],
    "public_url": ["https://livefuse-0.example.com"],
    "trusted_proxies": ["10.0.0.0/8,fd00::/8"],
}

# flags that only make sense with another: given to both sides of the comparison
CONTEXT = {"turn_secret": ["--ice-servers", "turn:127.0.0.1:3478", "--turn-secret", "the-first-secret-of-16"]}


def _non_default(action: argparse.Action, photo: Path) -> list[str]:
    flag = action.option_strings[-1]
    if isinstance(action, argparse._StoreTrueAction):
        return [flag]
    if action.dest in SAMPLES:
        return [flag, *SAMPLES[action.dest]]
    if action.dest in ("source", "reference_face"):
        return [flag, str(photo)]
    if action.choices is not None:
        return [flag, str(next(choice for choice in action.choices if choice != action.default))]
    if action.type in (int, float):
        return [flag, str((action.default or 0) + 3)]
    raise AssertionError(f"no sample value for {flag}: add one to SAMPLES")


def _parse(command: str, photo: Path, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args([command, *_required(command, photo), *extra])


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_every_flag_is_read_by_a_config_or_by_its_command(command: str) -> None:
    read_by_configs = {
        dest for config in CONFIGS[command] for s in arg_sources(config).values() for dest in s.dests
    }
    unread = {action.dest for action in _actions(command)} - read_by_configs - OWN[command]
    assert unread == set(), f"{command}: flags nothing reads"


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_every_config_flag_changes_its_field(command: str, photo: Path) -> None:
    """Set each flag to a value other than its default: the field it names must change (an ignored
    flag, like `serve --intra-op-threads` once was, or an explicit 0 turned into the default, fails)."""
    for config in CONFIGS[command]:
        for name, source in arg_sources(config).items():
            for action in _actions(command):
                if action.dest not in source.dests:
                    continue
                context = CONTEXT.get(action.dest, [])
                before: object = config_from_args(config, _parse(command, photo, *context))
                changed: object = config_from_args(
                    config, _parse(command, photo, *context, *_non_default(action, photo))
                )
                assert getattr(changed, name) != getattr(before, name), f"{command} {action.option_strings}"


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_absent_flags_build_the_configs_defaults(
    command: str, photo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("LIVEFUSE_TOKEN", "LIVEFUSE_ICE_SERVERS", "LIVEFUSE_TURN_SECRET", "LIVEFUSE_TURN_TTL",
                     "LIVEFUSE_ICE_PORT_RANGE", "LIVEFUSE_PUBLIC_ADDRESS", "LIVEFUSE_PUBLIC_URL",
                     "LIVEFUSE_TRUSTED_PROXIES"):  # fmt: skip
        monkeypatch.delenv(variable, raising=False)
    args = _parse(command, photo)
    for config in CONFIGS[command]:
        differ = SERVE_DEFAULTS_DIFFER if config is DaemonConfig and command == "serve" else {}
        assert config_from_args(config, args) == config(**differ), config.__name__


def test_an_explicit_zero_is_kept() -> None:
    args = build_parser().parse_args(["serve", "--rate-limit", "0", "--intra-op-threads", "0"])
    assert config_from_args(DaemonConfig, args).rate_limit_per_minute == 0  # off, as its help says
    assert config_from_args(PipelineConfig, args).intra_op_threads == 0


def test_choices_come_from_the_literals() -> None:
    expected = {
        "engine": ENGINE_CHOICES,
        "face_selector": FACE_SELECTOR_MODES,
        "execution_provider": BACKEND_REQUESTS,
        "detector": model_names("detector"),
        "swapper_model": model_names("swapper"),
        "frame_path": FRAME_PATH_CHOICES,
    }
    for command in CONFIGS:
        for action in _actions(command):
            if action.dest in expected:
                assert tuple(action.choices or ()) == expected[action.dest], (command, action.dest)
    assert ENGINE_CHOICES == ("auto", "mesh", "inswapper") and "yunet_n" in model_names("detector")


def test_bench_hands_its_model_and_swap_flags_to_the_daemon(photo: Path) -> None:
    bench_actions = {action.dest: action for action in _actions("bench")}
    forwarded = {dest for dest, _, _ in DAEMON_FLAGS}
    pipeline_dests = {dest for config in PIPELINE for s in arg_sources(config).values() for dest in s.dests}
    assert pipeline_dests <= forwarded, "a model or swap flag `bench --live/--whip` would not pass on"
    assert daemon_args(_parse("bench", photo)) == ()  # defaults: nothing to pass (any baseline takes it)
    for dest, flag, default in DAEMON_FLAGS:
        assert bench_actions[dest].default == default, flag
        bench_args = _parse("bench", photo, *_non_default(bench_actions[dest], photo))
        serve_args = build_parser().parse_args(["serve", *daemon_args(bench_args)])
        for config in PIPELINE:
            assert config_from_args(config, serve_args) == config_from_args(config, bench_args), flag
        if dest == "reference_face":
            assert serve_args.reference_face == str(photo.resolve())

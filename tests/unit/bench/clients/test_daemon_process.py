"""DaemonProcess against stand-in scripts: ready, crashing and hanging daemons, and idempotent close."""

import json
import os
import textwrap
import urllib.request
from pathlib import Path

import pytest

from bench.clients import daemon_process
from bench.clients.daemon_process import DaemonProcess
from gpu_ops.errors import LivefuseError

# Stand-ins get the same argv as run_stream.py: they read --port from it.
_READY_SERVER = textwrap.dedent(
    """
    import http.server, json, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"ready": True, "argv": sys.argv[1:]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)
_CRASHING = "import sys\nsys.stderr.write('error: model file missing\\n')\nsys.exit(3)\n"
_HANGING = "import os, sys, time\nopen(sys.argv[-1], 'w').write(str(os.getpid()))\ntime.sleep(60)\n"


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    path = tmp_path / "run_stream.py"
    path.write_text(script)
    monkeypatch.setattr(daemon_process, "RUN_STREAM", path)


def test_start_waits_for_ready_and_passes_loopback_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in(tmp_path, monkeypatch, _READY_SERVER)
    with DaemonProcess(
        tmp_path / "models", tmp_path / "log", extra_args=("--detector", "scrfd_500m")
    ) as daemon:
        with urllib.request.urlopen(f"{daemon.url}/ready", timeout=5) as response:
            argv = json.loads(response.read())["argv"]
        assert daemon.url == f"http://127.0.0.1:{daemon.port}"
    assert argv[argv.index("--ice-address") + 1] == "127.0.0.1"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--models-dir") + 1] == str(tmp_path / "models")
    assert argv[-2:] == ["--detector", "scrfd_500m"]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{daemon.url}/ready", timeout=2)  # stopped on exit


def test_a_daemon_that_exits_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in(tmp_path, monkeypatch, _CRASHING)
    with pytest.raises(LivefuseError, match=r"exited with code 3:\n.*model file missing"):
        DaemonProcess(tmp_path, tmp_path / "log").start()


def test_a_daemon_that_never_gets_ready_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(tmp_path, monkeypatch, _HANGING)
    pid_file = tmp_path / "pid"
    daemon = DaemonProcess(tmp_path, tmp_path / "log", extra_args=(str(pid_file),), ready_timeout_s=2.0)
    with pytest.raises(LivefuseError, match="not ready after"):
        daemon.start()
    with pytest.raises(ProcessLookupError):  # terminated and reaped: no child left behind
        os.kill(int(pid_file.read_text()), 0)


def test_close_is_idempotent_and_safe_before_start(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path, tmp_path / "log")
    daemon.close()
    daemon.close()

"""The real daemon (`run_stream.py serve`) as a child process on a loopback port, for `bench --live` and
the browser test: a separate process, so its event loop and worker thread compete with the client exactly
as they would with a real caller, and a crash shows up as a log tail rather than a hung benchmark.
"""

import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from gpu_ops.errors import LivefuseError

logger = logging.getLogger(__name__)

RUN_STREAM = Path(__file__).resolve().parents[2] / "run_stream.py"
LOG_TAIL_CHARS = 3000


def free_loopback_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (the daemon binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _is_ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/ready", timeout=2) as response:
            return bool(json.loads(response.read()).get("ready"))
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return False  # not listening yet, or 503 while the models load


class DaemonProcess:
    """`with DaemonProcess(models_dir, log_path) as daemon:` starts the daemon, waits for /ready and stops
    it (SIGTERM, then SIGKILL) on exit. `daemon.url` is its base URL; ICE is offered on 127.0.0.1 only.

    :param extra_args: more `serve` flags, e.g. ("--execution-provider", "cuda").
    :param run_stream: the entry point to run (another revision's checkout, for `bench --baseline`).
    :param port: the port to serve on (default: a free one), for flags that must name it (--public-url).
    """

    def __init__(
        self,
        models_dir: Path,
        log_path: Path,
        *,
        extra_args: tuple[str, ...] = (),
        ready_timeout_s: float = 60.0,
        run_stream: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.port = port if port is not None else free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._run_stream = run_stream or RUN_STREAM
        self._command = [
            sys.executable, str(self._run_stream), "--log-format", "json",
            "serve", "--host", "127.0.0.1", "--port", str(self.port),
            "--models-dir", str(models_dir), "--ice-address", "127.0.0.1", *extra_args,
        ]  # fmt: skip
        self._ready_timeout_s = ready_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no daemon log)"

    def start(self) -> None:
        """Launch and block until /ready says true; LivefuseError with the log tail if it never does."""
        logger.info("starting daemon on %s (log %s)", self.url, self.log_path)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self._command, cwd=self._run_stream.parent, stdout=log, stderr=subprocess.STDOUT
            )
        started = time.monotonic()
        try:
            while not _is_ready(self.url):
                if self._process.poll() is not None:
                    raise LivefuseError(
                        f"daemon exited with code {self._process.returncode}:\n{self.log_tail()}"
                    )
                if time.monotonic() - started > self._ready_timeout_s:
                    raise LivefuseError(
                        f"daemon not ready after {self._ready_timeout_s:.0f} s:\n{self.log_tail()}"
                    )
                time.sleep(0.2)
        except BaseException:
            self.close()
            raise
        logger.info("daemon ready after %.1f s", time.monotonic() - started)

    def close(self) -> None:
        """Stop the daemon; idempotent, and safe when start() failed or never ran."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.warning("daemon ignored SIGTERM for 10 s; killing it")
            process.kill()
            process.wait()

"""A real Janus (the Debian package) for the room tests and `bench --room`: configuration written to a
temporary folder (only the VideoRoom plugin and the HTTP transport, ICE on the namespace's veth device,
no STUN), started in the calling thread's network namespace, restartable on the same port.

Rooms: OPEN_ROOM (no pin), PIN_ROOM (pin PIN). With `api_secret` every request must carry it; with
`token_secret` every request needs a token signed with it (`signed_token`).
"""

import base64
import hashlib
import hmac
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from bench.clients.network_namespace import ADDRESS, DEVICE

OPEN_ROOM = 1234
PIN_ROOM = 4321
PIN = "pin-7731"
LIB = Path("/usr/lib/x86_64-linux-gnu/janus")
READY_TIMEOUT_S = 20.0
START_ATTEMPTS = 3


def janus_missing_reason() -> str | None:
    if shutil.which("janus") is None:
        return "Janus is not installed (apt-get install janus)"
    if not (LIB / "plugins" / "libjanus_videoroom.so").exists():
        return f"the Janus VideoRoom plugin is not in {LIB}/plugins"
    return None


def signed_token(
    secret: str, plugins: tuple[str, ...] = ("janus.plugin.videoroom",), ttl_s: int = 3600
) -> str:
    """A Janus signed token (token_auth_secret): "expiry,janus,plugins:base64(HMAC-SHA1)"."""
    data = ",".join((str(int(time.time()) + ttl_s), "janus", *plugins))
    signature = hmac.new(secret.encode(), data.encode(), hashlib.sha1).digest()
    return f"{data}:{base64.b64encode(signature).decode()}"


def _disabled(folder: str, keep: str) -> str:
    names = sorted(path.name for path in (LIB / folder).glob("*.so") if path.name != keep)
    return ",".join(names)


def write_config(
    folder: Path,
    port: int,
    api_secret: str | None,
    token_secret: str | None = None,
    session_timeout_s: int = 60,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    secret_line = f'\tapi_secret = "{api_secret}"\n' if api_secret else ""
    if token_secret:  # signed tokens (HMAC-SHA1 over "expiry,janus,plugin..."): see `signed_token`
        secret_line += f'\ttoken_auth = true\n\ttoken_auth_secret = "{token_secret}"\n'

    (folder / "janus.jcfg").write_text(
        "general: {\n"
        f'\tconfigs_folder = "{folder}"\n'
        f'\tplugins_folder = "{LIB}/plugins"\n'
        f'\ttransports_folder = "{LIB}/transports"\n'
        f'\tevents_folder = "{LIB}/events"\n'
        f'\tloggers_folder = "{LIB}/loggers"\n'
        "\tdebug_level = 4\n"
        f"\tsession_timeout = {session_timeout_s}\n"
        f"{secret_line}"
        "}\n"
        'media: {\n\trtp_port_range = "40000-40999"\n}\n'
        f'nat: {{\n\tice_enforce_list = "{DEVICE}"\n\tnice_debug = false\n}}\n'
        f'plugins: {{\n\tdisable = "{_disabled("plugins", "libjanus_videoroom.so")}"\n}}\n'
        f'transports: {{\n\tdisable = "{_disabled("transports", "libjanus_http.so")}"\n}}\n'
        f'events: {{\n\tbroadcast = false\n\tdisable = "{_disabled("events", "")}"\n}}\n'
        f'loggers: {{\n\tdisable = "{_disabled("loggers", "")}"\n}}\n'
    )
    (folder / "janus.transport.http.jcfg").write_text(
        'general: {\n\tjson = "plain"\n\tbase_path = "/janus"\n\thttp = true\n'
        f'\tport = {port}\n\tinterface = "{DEVICE}"\n\thttps = false\n}}\n'
        "admin: {\n\tadmin_http = false\n}\n"
    )
    rooms = []
    for room, pin in ((OPEN_ROOM, None), (PIN_ROOM, PIN)):
        pin_line = f'\tpin = "{pin}"\n' if pin else ""
        rooms.append(
            f'room-{room}: {{\n\tdescription = "livefuse test {room}"\n{pin_line}\tpublishers = 12\n'
            '\tbitrate = 2000000\n\tfir_freq = 2\n\tvideocodec = "vp8"\n\taudiocodec = "opus"\n}\n'
        )
    (folder / "janus.plugin.videoroom.jcfg").write_text("general: {\n}\n" + "".join(rooms))
    return folder / "janus.jcfg"


class JanusServer:
    """`with JanusServer(folder, port) as janus:`; `janus.url` is its HTTP API; `restart()`; `stop()`."""

    def __init__(
        self,
        folder: Path,
        port: int,
        api_secret: str | None = None,
        config: Path | None = None,
        *,
        token_secret: str | None = None,
        session_timeout_s: int = 60,
    ) -> None:
        self.folder = folder
        self.port = port
        self.url = f"http://{ADDRESS}:{port}/janus"
        self.log_path = folder / "janus.log"
        self._config = config or write_config(folder, port, api_secret, token_secret, session_timeout_s)
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def committed(cls, folder: Path, port: int) -> "JanusServer":
        """A Janus of configuration files already in `folder` (the deployment's), listening on `port`."""
        return cls(folder, port, config=folder / "janus.jcfg")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start Janus and wait until its API answers. A start that exits at once is tried again
        (START_ATTEMPTS): right after a restart its HTTP port can still be held by the old process."""
        for attempt in range(1, START_ATTEMPTS + 1):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            log = self.log_path.open("ab")
            self._process = subprocess.Popen(
                ["janus", "-F", str(self.folder), "-C", str(self._config), "-o", "-d", "4"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            log.close()
            deadline = time.monotonic() + READY_TIMEOUT_S
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    break
                if self._answers():
                    return
                time.sleep(0.1)
            else:
                raise RuntimeError(f"Janus did not answer within {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
            failure = self.log_path.read_text(errors="replace")[offset:][-3000:]
            if attempt == START_ATTEMPTS:
                raise RuntimeError(f"Janus exited ({self._process.returncode}):\n{failure}")
            time.sleep(0.5)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/info", timeout=1) as response:
                return json.loads(response.read()).get("janus") == "server_info"
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

"""A private network namespace for the room tests and `bench --room` against Janus: libnice inside Janus
gathers no candidate on the loopback device, so the namespace gets 127.0.0.2 on a veth device (the only
device Janus's ICE may use) and every peer uses that address. Nothing in it can reach another machine:
the namespace has no route out.

The caller's own thread enters the namespace with setns(2) (`entered`), so its event loop's sockets and the
processes it starts (Janus, a daemon) live there; the thread goes back to where it was on exit.
"""

import ctypes
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

ADDRESS = "127.0.0.2"
DEVICE = "lfj0"
PEER_DEVICE = "lfj1"  # a veth pair: both ends inside the namespace (no dummy module here)
CLONE_NEWNET = 0x40000000


def unavailable_reason() -> str | None:
    """Why a namespace cannot be made here (None: it can)."""
    if shutil.which("ip") is None:
        return "the `ip` tool (iproute2) is not installed"
    if os.geteuid() != 0:
        return "making a network namespace needs root"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextmanager
def namespace() -> Iterator[str]:
    """The name of a fresh namespace with lo up and ADDRESS on DEVICE (one end of a veth pair); deleted on exit."""
    name = f"lf-{secrets.token_hex(4)}"
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "link", "add", DEVICE, "type", "veth", "peer", "name", PEER_DEVICE)
        _ip("-n", name, "addr", "add", f"{ADDRESS}/32", "dev", DEVICE)
        _ip("-n", name, "link", "set", PEER_DEVICE, "up")
        _ip("-n", name, "link", "set", DEVICE, "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True, timeout=10)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextmanager
def entered(name: str) -> Iterator[None]:
    """The calling thread inside namespace `name` for the block (sockets, child processes)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)

"""CPU time of a process from /proc (user + system, all its threads): what a live call costs the daemon's
machine, codecs included, read without sampling and so without slowing what it measures."""

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds `pid` has used so far; None where /proc cannot tell (not Linux, gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    user_ticks, system_ticks = int(fields[11]), int(fields[12])
    return (user_ticks + system_ticks) / os.sysconf("SC_CLK_TCK")

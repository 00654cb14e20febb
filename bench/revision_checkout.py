"""Another revision of this checkout, side by side, so a bench can alternate the old daemon and the new
one in one run (this machine's speed drifts by 15 % within minutes: a number from an hour ago is not a
baseline). A `git worktree` of the revision in a temporary folder, removed afterwards."""

import logging
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.clients.daemon_process import RUN_STREAM
from gpu_ops.errors import InvalidInputError

logger = logging.getLogger(__name__)

CHECKOUT_ROOT = RUN_STREAM.parent


def _git(*args: str) -> str:
    try:
        result = subprocess.run(
            ["git", *args], cwd=CHECKOUT_ROOT, capture_output=True, text=True, timeout=120, check=False
        )
    except FileNotFoundError:
        raise InvalidInputError("--baseline needs git and a git checkout of livefuse") from None
    if result.returncode != 0:
        raise InvalidInputError(f"git {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


@contextmanager
def revision_checkout(revision: str) -> Iterator[tuple[Path, str]]:
    """(folder holding run_stream.py at `revision`, the revision's short hash); removed on exit."""
    commit = _git("rev-parse", "--verify", "--short", f"{revision}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="livefuse-baseline-") as scratch:
        folder = Path(scratch) / commit
        _git("worktree", "add", "--detach", str(folder), commit)
        logger.info("baseline %s (%s) checked out in %s", revision, commit, folder)
        try:
            yield folder, commit
        finally:
            _git("worktree", "remove", "--force", str(folder))

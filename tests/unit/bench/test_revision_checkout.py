"""`bench --baseline REV`: the revision is checked out beside this one and removed afterwards."""

import subprocess

import pytest

from bench.revision_checkout import CHECKOUT_ROOT, revision_checkout
from gpu_ops.errors import InvalidInputError


def _is_git_checkout() -> bool:
    probe = subprocess.run(
        ["git", "rev-parse", "--git-dir"], cwd=CHECKOUT_ROOT, capture_output=True, check=False
    )
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _is_git_checkout(), reason="not a git checkout")


def test_a_revision_is_checked_out_and_removed() -> None:
    with revision_checkout("HEAD") as (folder, commit):
        assert (folder / "run_stream.py").is_file()
        assert folder.name == commit
    assert not folder.exists()
    worktrees = subprocess.run(
        ["git", "worktree", "list"], cwd=CHECKOUT_ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert str(folder) not in worktrees


def test_an_unknown_revision_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="no-such-revision"), revision_checkout("no-such-revision"):
        pass

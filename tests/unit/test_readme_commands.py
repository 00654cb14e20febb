"""The README's two set-up commands: the daemon's names no ../shared (a clone has none beside it), and
the test command the README states is the one `.ci/run` runs, word for word."""

import re

from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
SETUP = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]


def test_the_daemon_command_needs_nothing_beside_the_clone() -> None:
    first_block = SETUP.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "run_stream.py serve" in first_block
    assert "../shared" not in first_block and "--models-dir" not in first_block


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    stated = re.findall(r"runs exactly\s+`([^`]+)`", SETUP)
    assert len(stated) == 1, "the README must state the test command .ci/run runs"
    ci_lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert " ".join(stated[0].split()) in ci_lines

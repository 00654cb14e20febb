"""Reading Dockerfiles and .dockerignore the way Docker does, for the deployment tests.

No Docker engine exists on the test machines, so the image build itself is not run; these helpers let
the tests check what the build would do: which instructions a Dockerfile has (continuations joined,
comments dropped, exec-form JSON parsed) and which files .dockerignore lets into the build context
(moby's pattern rules: Go filepath.Match per path segment plus `**`, `!` exceptions, last match wins,
a pattern that matches a parent folder matches everything in it).
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, CMD ...
    arguments: str  # the rest of the (joined) line


def parse_dockerfile(path: Path) -> list[Instruction]:
    instructions: list[Instruction] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue  # comments and blank lines may sit inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = pending + stripped
        pending = ""
        keyword, _, arguments = line.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip()))
    assert not pending, f"{path}: the last instruction ends with a line continuation"
    return instructions


def only(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [instruction for instruction in instructions if instruction.keyword == keyword]


def last(instructions: list[Instruction], keyword: str) -> Instruction:
    found = only(instructions, keyword)
    assert found, f"no {keyword} instruction"
    return found[-1]


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form instruction (shell form is refused: no signals reach the app)."""
    assert arguments.startswith("["), f"not exec form: {arguments}"
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value)
    return value


def healthcheck_command(arguments: str) -> list[str]:
    """`HEALTHCHECK [--options] CMD [...]` -> the exec-form command."""
    options, separator, command = arguments.partition("CMD ")
    assert separator, f"HEALTHCHECK without CMD: {arguments}"
    assert all(option.startswith("--") for option in options.split()), options
    return exec_form(command.strip())


def env_values(instructions: list[Instruction]) -> dict[str, str]:
    """ENV KEY=VALUE pairs (the key=value form only; values without spaces)."""
    values: dict[str, str] = {}
    for instruction in only(instructions, "ENV"):
        for pair in instruction.arguments.split():
            key, separator, value = pair.partition("=")
            assert separator, f"ENV uses the legacy `ENV key value` form: {instruction.arguments}"
            values[key] = value
    return values


def _segment_regex(pattern: str) -> str:
    out = ""
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            out += ".*"
            index += 2
            if index < len(pattern) and pattern[index] == "/":
                out = out[:-2] + "(?:.*/)?"
                index += 1
            continue
        out += "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
        index += 1
    return out


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    exception: bool


def read_dockerignore(path: Path) -> list[IgnoreRule]:
    rules: list[IgnoreRule] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = line[1:].strip() if exception else line
        pattern = pattern.strip("/")
        assert "[" not in pattern and "\\" not in pattern, f"character classes are not modelled: {line}"
        rules.append(IgnoreRule(re.compile(_segment_regex(pattern) + r"\Z"), exception))
    return rules


def in_build_context(relative_path: str, rules: list[IgnoreRule]) -> bool:
    """Whether `relative_path` (posix, from the context root) is sent to the builder."""
    parts = relative_path.split("/")
    candidates = ["/".join(parts[: count + 1]) for count in range(len(parts))]
    excluded = False
    for rule in rules:
        if any(rule.regex.match(candidate) for candidate in candidates):
            excluded = not rule.exception
    return not excluded

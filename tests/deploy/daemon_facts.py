"""What the deployment files may rely on, read from the daemon itself without importing web/ or streamer/
(their modules are being moved into sub-packages: the source text is searched wherever it lives).

- routes: `router.add_get("/path", ...)` calls in web/**.py
- metrics: `Gauge("livefuse_...")` (and Counter/Histogram) constructions in streamer/**.py, by their
  exposed names (a counter's ends in _total)
- CLI: `python run_stream.py serve --help` in a subprocess (flags and their choices)
- environment: the LIVEFUSE_* names the product's source reads
"""

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("gpu_ops", "models", "streamer", "web")

# The flags and variables of issue 11 items 2 and 4 (NAT traversal, several daemons behind a proxy) that
# the manifests and compose.yaml set: the daemon has them, and the tests check them like any other.
NETWORK_SERVE_FLAGS = frozenset(
    {
        "--ice-servers",
        "--turn-secret",
        "--turn-ttl",
        "--ice-port-range",
        "--public-address",
        "--public-url",
        "--trusted-proxies",
    }
)
NETWORK_ENVIRONMENT = frozenset(
    {
        "LIVEFUSE_ICE_SERVERS",
        "LIVEFUSE_TURN_SECRET",
        "LIVEFUSE_TURN_TTL",
        "LIVEFUSE_ICE_PORT_RANGE",
        "LIVEFUSE_PUBLIC_ADDRESS",
        "LIVEFUSE_PUBLIC_URL",
        "LIVEFUSE_TRUSTED_PROXIES",
    }
)

ROUTE_CALL = re.compile(r"\badd_(get|post|put|patch|delete)\(\s*[\"'](/[^\"']*)[\"']")
METRIC_CALL = re.compile(r"\b(Gauge|Counter|Histogram)\(\s*[\"'](livefuse_[a-z0-9_]+)[\"']")
PUBLIC_PATHS = re.compile(r"PUBLIC_GET_PATHS\s*=\s*frozenset\(\s*\{([^}]*)\}\s*\)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
FLAG_CHOICES = re.compile(r"(--[a-z][a-z0-9-]*) \{([^}]+)\}")
ENVIRONMENT_NAME = re.compile(r"[\"'](LIVEFUSE_[A-Z0-9_]+)[\"']")


def product_sources(package: str) -> list[Path]:
    return sorted((REPO_ROOT / package).rglob("*.py"))


@cache
def get_routes() -> frozenset[str]:
    """Paths the daemon answers GET on."""
    paths = set()
    for path in product_sources("web"):
        for method, route in ROUTE_CALL.findall(path.read_text(encoding="utf-8")):
            if method == "get":
                paths.add(route)
    return frozenset(paths)


@cache
def exported_metrics() -> dict[str, str]:
    """Metric name -> kind (gauge, counter, histogram) of every metric the daemon registers."""
    metrics: dict[str, str] = {}
    for path in product_sources("streamer") + product_sources("web"):
        for kind, name in METRIC_CALL.findall(path.read_text(encoding="utf-8")):
            # prometheus_client exposes a counter as NAME_total
            metrics[f"{name}_total" if kind == "Counter" else name] = kind.lower()
    return metrics


@cache
def public_get_paths() -> frozenset[str]:
    """The routes the bearer-token check lets through (web auth's PUBLIC_GET_PATHS)."""
    found: set[str] = set()
    for path in product_sources("web"):
        for body in PUBLIC_PATHS.findall(path.read_text(encoding="utf-8")):
            found |= set(re.findall(r"[\"'](/[^\"']*)[\"']", body))
    if not found:
        raise AssertionError(
            "PUBLIC_GET_PATHS not found under web/: where does the daemon list its public routes?"
        )
    return frozenset(found)


@cache
def serve_help() -> str:
    result = subprocess.run(
        [sys.executable, "run_stream.py", "serve", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def serve_flags() -> frozenset[str]:
    return frozenset(FLAG.findall(serve_help()))


def serve_flag_choices() -> dict[str, frozenset[str]]:
    """Flags with a fixed set of values, e.g. --execution-provider -> {cpu, cuda, tensorrt}."""
    return {flag: frozenset(values.split(",")) for flag, values in FLAG_CHOICES.findall(serve_help())}


@cache
def environment_read_by_product() -> frozenset[str]:
    names: set[str] = set()
    sources = [REPO_ROOT / "run_stream.py"] + [
        p for package in PRODUCT_PACKAGES for p in product_sources(package)
    ]
    for path in sources:
        names |= set(ENVIRONMENT_NAME.findall(path.read_text(encoding="utf-8")))
    return frozenset(names)


def check_serve_arguments(arguments: list[str], where: str) -> None:
    """Every `--flag` in `arguments` is a flag of `serve`, and choice values are valid."""
    known = serve_flags()
    choices = serve_flag_choices()
    for index, argument in enumerate(arguments):
        if not argument.startswith("--"):
            continue
        flag = argument.split("=", 1)[0]
        assert flag in known, f"{where}: {flag} is not a flag of `run_stream.py serve`"
        if flag in choices:
            value = argument.split("=", 1)[1] if "=" in argument else arguments[index + 1]
            assert value in choices[flag], f"{where}: {flag} {value} is not one of {sorted(choices[flag])}"


def argument_value(arguments: list[str], flag: str) -> str | None:
    """The value given to `flag` (last one wins, as in argparse), or None."""
    value = None
    for index, argument in enumerate(arguments):
        if argument == flag:
            value = arguments[index + 1]
        elif argument.startswith(flag + "="):
            value = argument.split("=", 1)[1]
    return value

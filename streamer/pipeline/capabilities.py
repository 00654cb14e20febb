"""What this pipeline can do, and why not where it cannot: the engines and the optional features
(enhancer, reference face selection) with `available` and, when false, the reason naming the fix.

The daemon answers `GET /api/capabilities` with it, so the page offers only what works; a settings change
asking for something unavailable is refused (409) by `refusal` instead of failing every frame and ending
the call. The engines and features are the pipeline's; this module knows only which setting asks for which.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from models.model_files import ModelStore

FEATURE_ENHANCER = "enhancer"
FEATURE_REFERENCE = "reference"


@dataclass(frozen=True)
class Capability:
    """One engine or feature: available, or the reason it is not (a sentence naming the fix)."""

    available: bool
    reason: str | None = None

    @classmethod
    def unavailable(cls, reason: str) -> "Capability":
        return cls(False, reason)


AVAILABLE = Capability(True)


@dataclass(frozen=True)
class Capabilities:
    """Every engine choice (including "auto", always available: it resolves to `default_engine`) and every
    optional feature of one loaded pipeline."""

    engines: Mapping[str, Capability]
    features: Mapping[str, Capability]
    default_engine: str

    @classmethod
    def from_reasons(
        cls,
        engines: Sequence[str],
        features: Sequence[str],
        unavailable: Mapping[str, str],
        default_engine: str,
    ) -> "Capabilities":
        """Every named engine and feature: available unless `unavailable` gives its reason."""

        def rows(names: Sequence[str]) -> dict[str, Capability]:
            return {
                n: Capability.unavailable(unavailable[n]) if n in unavailable else AVAILABLE for n in names
            }

        return cls(rows(engines), rows(features), default_engine)

    def as_json(self) -> dict[str, Any]:
        def rows(items: Mapping[str, Capability]) -> dict[str, dict[str, Any]]:
            return {name: {"available": c.available, "reason": c.reason} for name, c in items.items()}

        return {
            "default_engine": self.default_engine,
            "engines": rows({"auto": AVAILABLE, **self.engines}),
            "features": rows(self.features),
        }

    def refusal(self, changes: Mapping[str, object]) -> str | None:
        """Why these settings changes cannot be honoured (the first unavailable thing they ask for), or
        None. Only what they turn on counts: switching an unavailable feature off is always fine."""
        engine = changes.get("engine")
        if isinstance(engine, str) and engine in self.engines and not self.engines[engine].available:
            return f"engine {engine!r} is not available: {self.engines[engine].reason}"
        asked = {
            FEATURE_ENHANCER: changes.get("enhancer") is True,
            FEATURE_REFERENCE: changes.get("face_selector") == "reference",
        }
        for feature, wanted in asked.items():
            capability = self.features.get(feature)
            if wanted and capability is not None and not capability.available:
                return f"{feature} is not available: {capability.reason}"
        return None


def unavailable_parts(
    store: ModelStore,
    engines: Mapping[str, object],
    missing: Sequence[str],
    enhancer_model: str,
    reference_model: str,
) -> dict[str, str]:
    """Engine or feature name -> why it cannot run with these loaded engines, each reason naming the fix
    (the store's verdict on the file). `missing`: the inswapper engine's files that did not verify."""
    unavailable: dict[str, str] = {}
    inswapper = engines.get("inswapper")
    if inswapper is None:
        details = "; ".join(store.check(name).detail for name in missing) or "it was not loaded"
        unavailable["inswapper"] = f"the inswapper engine needs {', '.join(missing)}: {details}"
        enhancer = store.check(enhancer_model)
        needs = "" if enhancer.ok else f"; it also needs {enhancer_model}: {enhancer.detail}"
        unavailable[FEATURE_ENHANCER] = (
            f"the enhancer runs on the inswapper engine, which is not available here (see engine inswapper){needs}"
        )
    elif getattr(inswapper, "enhancer", None) is None:
        detail = store.check(enhancer_model).detail
        unavailable[FEATURE_ENHANCER] = f"the enhancer needs {enhancer_model}: {detail}"
    reference = store.check(reference_model)
    if not reference.ok:
        unavailable[FEATURE_REFERENCE] = (
            f"reference face selection needs {reference_model}: {reference.detail}"
        )
    return unavailable

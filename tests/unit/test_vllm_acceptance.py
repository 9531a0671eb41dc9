"""The acceptance-method intent rendered on each version boundary (docs/design/vllm-versions.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot.api import v1alpha1
from specpilot.vllm.acceptance import methods_available, relaxed_rendering
from specpilot.vllm.dialects import UnsupportedCombination, render_command
from specpilot.vllm.versions import Engine, v

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT = "meta-llama/Llama-3.2-1B-Instruct"


def spec(version: str, acceptance: dict[str, Any] | None, method: str = "draft_model", **engine: Any) -> Any:
    speculation: dict[str, Any] = {"method": method, "numSpeculativeTokens": 3}
    if method == "draft_model":
        speculation["draft"] = {"model": DRAFT}
    if acceptance is not None:
        speculation["acceptance"] = acceptance
    return v1alpha1.parse_spec(
        {
            "engine": {"image": "vllm/vllm-openai", "version": version, **engine},
            "target": {"model": TARGET},
            "speculation": speculation,
        }
    )


RELAXED = {"method": "Relaxed", "posteriorThreshold": 0.2, "posteriorAlpha": 0.4}
LEGACY_TYPICAL = [
    "--spec-decoding-acceptance-method",
    "typical_acceptance_sampler",
    "--typical-acceptance-sampler-posterior-threshold",
    "0.2",
    "--typical-acceptance-sampler-posterior-alpha",
    "0.4",
]
TYPICAL_KEYS = {"acceptance_method": "typical_acceptance_sampler", "posterior_threshold": 0.2, "posterior_alpha": 0.4}

# (version, acceptance intent, method, rendered keys or legacy argv tail)
RENDERED: list[tuple[str, dict[str, Any], str, dict[str, Any] | list[str]]] = [
    ("0.6.0", RELAXED, "draft_model", LEGACY_TYPICAL),
    ("0.8.1", RELAXED, "ngram", LEGACY_TYPICAL),
    ("0.8.2", RELAXED, "draft_model", LEGACY_TYPICAL),  # 0.8.2 gets the legacy dialect (dialects.py)
    ("0.8.3", RELAXED, "draft_model", TYPICAL_KEYS),  # 0.8.x: speculation falls back to V0
    ("0.9.2", RELAXED, "draft_model", TYPICAL_KEYS),  # draft_model still runs on V0 in 0.9.x
    ("0.9.2", {"method": "Relaxed"}, "draft_model", {"acceptance_method": "typical_acceptance_sampler"}),
    ("0.10.0", {"method": "Exact"}, "ngram", {}),
    ("0.22.0", {"draftSampling": "Probabilistic"}, "draft_model", {"draft_sample_method": "probabilistic"}),
    ("0.25.0", {"draftSampling": "Greedy"}, "ngram", {"draft_sample_method": "greedy"}),
    ("0.26.0", {"method": "Block"}, "draft_model", {"rejection_sample_method": "block"}),
    ("0.32.0", {"method": "Block", "draftSampling": "Probabilistic"}, "ngram",
     {"rejection_sample_method": "block", "draft_sample_method": "probabilistic"}),
    ("0.33.0", {"method": "Relaxed"}, "draft_model", {"rejection_sample_method": "fly"}),
    ("0.33.0", {"method": "Block"}, "ngram", {"rejection_sample_method": "block"}),
]  # fmt: skip


@pytest.mark.parametrize(("version", "intent", "method", "expected"), RENDERED)
def test_rendered_per_version(
    version: str, intent: dict[str, Any], method: str, expected: dict[str, Any] | list[str]
) -> None:
    command = render_command(spec(version, intent, method))
    if isinstance(expected, list):
        assert list(command.argv[-len(expected) :]) == expected
        return
    rendered = json.loads(command.argv[command.argv.index("--speculative-config") + 1])
    keys = ("acceptance_method", "posterior_threshold", "posterior_alpha", "rejection_sample_method")
    got = {k: rendered[k] for k in (*keys, "draft_sample_method") if k in rendered}
    assert got == expected


# (version, intent, method, engine env, field, words the refusal must contain)
REFUSED: list[tuple[str, dict[str, Any], str, list[dict[str, str]], str, tuple[str, ...]]] = [
    ("0.9.2", {"method": "Relaxed"}, "ngram", [], "spec.speculation.acceptance.method",
     ("vLLM 0.9.2", "V1 engine", "VLLM_USE_V1=0", "offers Exact")),
    ("0.10.0", {"method": "Relaxed"}, "ngram", [], "spec.speculation.acceptance.method",
     ("vLLM 0.10.0", "no lossy acceptance", "FLy arrives in 0.33.0", "offers Exact")),
    ("0.32.0", {"method": "Relaxed"}, "draft_model", [], "spec.speculation.acceptance.method",
     ("vLLM 0.32.0", "offers Exact, Block")),
    ("0.25.0", {"method": "Block"}, "draft_model", [], "spec.speculation.acceptance.method",
     ("vLLM 0.25.0", "arrives in 0.26.0", "offers Exact")),
    ("0.6.0", {"method": "Block"}, "draft_model", [], "spec.speculation.acceptance.method",
     ("vLLM 0.6.0", "offers Exact, Relaxed")),
    ("0.21.0", {"draftSampling": "Probabilistic"}, "ngram", [], "spec.speculation.acceptance.draftSampling",
     ("vLLM 0.21.0", "arrives in 0.22.0")),
    ("0.33.0", RELAXED, "draft_model", [], "spec.speculation.acceptance.posteriorThreshold",
     ("vLLM 0.33.0", "FLy", "typical acceptance")),
]  # fmt: skip


@pytest.mark.parametrize(("version", "intent", "method", "env", "field", "words"), REFUSED)
def test_refused_with_version_and_alternatives(
    version: str, intent: dict[str, Any], method: str, env: list[dict[str, str]], field: str, words: tuple[str, ...]
) -> None:
    with pytest.raises(UnsupportedCombination) as caught:
        render_command(spec(version, intent, method, env=env))
    assert caught.value.field == field
    for word in words:
        assert word in caught.value.problem


def test_v0_forced_on_0_9_renders_typical_for_ngram() -> None:
    forced = spec("0.9.2", {"method": "Relaxed"}, "ngram", env=[{"name": "VLLM_USE_V1", "value": "0"}])
    config = render_command(forced).speculative_config
    assert config is not None
    assert config["acceptance_method"] == "typical_acceptance_sampler"


def test_exact_or_absent_keeps_the_config_hash() -> None:
    """Exact renders nothing, so adding it to an existing CR does not roll its pods."""
    plain = render_command(spec("0.33.0", None)).config_hash
    assert render_command(spec("0.33.0", {"method": "Exact"})).config_hash == plain
    assert render_command(spec("0.33.0", {"method": "Block"})).config_hash != plain


def test_speculation_off_renders_no_acceptance_but_still_refuses() -> None:
    """Off renders no speculative config; an impossible intent is refused anyway (autotune may switch it on)."""
    off = v1alpha1.parse_spec(
        {
            "engine": {"image": "i", "version": "0.33.0"},
            "target": {"model": TARGET},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3, "enabled": False,
                            "acceptance": {"method": "Block"}},
        }
    )  # fmt: skip
    assert "--speculative-config" not in render_command(off).argv
    old = off.model_copy(update={"engine": off.engine.model_copy(update={"version": "0.25.0"})})
    with pytest.raises(UnsupportedCombination) as caught:
        render_command(old)
    assert "vLLM 0.25.0" in caught.value.problem


def test_posterior_settings_need_relaxed() -> None:
    with pytest.raises(v1alpha1.InvalidSpec) as caught:
        spec("0.9.2", {"method": "Exact", "posteriorAlpha": 0.3})
    assert "only allowed when spec.speculation.acceptance.method is Relaxed" in str(caught.value)


@pytest.mark.parametrize(
    ("version", "engine", "methods", "relaxed"),
    [
        ("0.6.0", Engine.V0, ("Exact", "Relaxed"), "typical_acceptance_sampler"),
        ("0.9.2", Engine.V1, ("Exact",), None),
        ("0.17.0", Engine.V1, ("Exact",), None),
        ("0.26.0", Engine.V1, ("Exact", "Block"), None),
        ("0.33.0", Engine.V1, ("Exact", "Block", "Relaxed"), "rejection_sample_method fly"),
    ],
)
def test_methods_available(version: str, engine: Engine, methods: tuple[str, ...], relaxed: str | None) -> None:
    assert tuple(m.value for m in methods_available(v(version), engine)) == methods
    assert relaxed_rendering(v(version), engine) == relaxed

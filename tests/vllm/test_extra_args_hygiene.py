"""Why extraArgs may not touch rendered flags, shown with the real vLLM 0.33 parser and create_engine_config().

For every spelling specpilot refuses, the same token appended to a rendered command line really does override what
the plan checked (vLLM accepts underscores, `--flag=value`, dotted keys, unique prefixes and `--config FILE`), so
the refusal is needed; specpilot's renderer refuses it with the field named. Ordinary extraArgs leave every rendered
value as the spec says. Beyond those examples, the real parser's own list of option strings shows the class: every
spelling of every flag the renderer owns is refused, and no other flag is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from e2e.vllm import sample_configs as sc
from e2e.vllm.venvs import VllmVenv, validate_argv_cases
from specpilot.api import v1alpha1
from specpilot.vllm.dialects import UnsupportedCombination, extra_arg_problem, render_command
from tests.unit.test_vllm_dialects import DATA_PARALLEL_1, DATA_PARALLEL_2

pytestmark = pytest.mark.vllm

SPEC: dict[str, Any] = {
    "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxModelLen": 8192, "maxNumSeqs": 64},
    "target": {"model": sc.LLAMA_3_1_8B},
    "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
}

# (id, extra tokens, engine field that vLLM then reads from them, the value it reads)
OVERRIDES: list[tuple[str, list[str], str, Any]] = [
    ("underscore", ["--max_model_len", "2048"], "max_model_len", 2048),
    ("equals", ["--max-num-seqs=8"], "max_num_seqs", 8),
    ("underscore-equals", ["--max_num_seqs=16"], "max_num_seqs", 16),
    ("prefix", ["--max-model", "1024"], "max_model_len", 1024),
    ("served-name-underscore", ["--served_model_name", "other"], "served_model_name", "other"),
    # a dotted key after the rendered JSON replaces the whole speculative config: vLLM then refuses to start
    ("dotted", ["--speculative-config.num_speculative_tokens", "7"], "error", "SpeculativeConfig"),
    ("short-tp", ["-tp", "2"], "tensor_parallel_size", 2),
    # a config file cannot beat a rendered flag, but sets every flag specpilot leaves at vLLM's default
    ("config-file", ["--config", "{config}"], "kv_cache_dtype", "fp8"),
]


ACCEPTED: list[tuple[str, list[str]]] = [
    ("accepted-eager", ["--enforce-eager"]),
    ("accepted-batched", ["--max-num-batched-tokens", "8192"]),
    ("accepted-seed", ["--seed", "-1"]),
]


def _field(engine: dict[str, Any], path: str) -> Any:
    node: Any = engine
    for part in path.split("."):
        node = node[part]
    return node


@pytest.fixture(scope="module")
def outcome(vllm_validator_venv: VllmVenv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    config = tmp_path_factory.mktemp("vllm-config") / "serve.yaml"
    config.write_text("kv_cache_dtype: fp8\n")
    base = list(render_command(v1alpha1.parse_spec(SPEC)).argv)
    cases: list[dict[str, Any]] = [{"id": "rendered", "argv": base, "configs": sc.configs_for(sc.LLAMA_3_1_8B)}]
    for case_id, extra, _, _ in OVERRIDES:
        argv = base + [token.format(config=config) for token in extra]
        cases.append({"id": case_id, "argv": argv, "configs": sc.configs_for(sc.LLAMA_3_1_8B)})
    for case_id, extra in ACCEPTED:
        cases.append({"id": case_id, "argv": base + extra, "configs": sc.configs_for(sc.LLAMA_3_1_8B)})
    for dtype in [*(d.value for d in v1alpha1.KvCacheDtype), "int3"]:
        argv = [*base, "--kv-cache-dtype", dtype]
        cases.append({"id": f"kv-{dtype}", "argv": argv, "configs": sc.configs_for(sc.LLAMA_3_1_8B)})
    # what an unchecked served model name starting with "-" would do: become a flag
    flagged = [*base[:3], "--served-model-name", "--enforce-eager", *base[5:]]
    cases.append({"id": "name-as-flag", "argv": flagged, "configs": sc.configs_for(sc.LLAMA_3_1_8B)})
    for size, spellings in ((2, DATA_PARALLEL_2), (1, DATA_PARALLEL_1)):
        for extra in spellings:
            cases.append(
                {"id": f"dp{size}: {' '.join(extra)}", "argv": base + extra, "configs": sc.configs_for(sc.LLAMA_3_1_8B)}
            )
    cases.append({"id": "options", "options": True})
    results = validate_argv_cases(cases, python=vllm_validator_venv.python)
    return {r["id"]: r for r in results}


def test_the_rendered_command_means_what_the_spec_says(outcome: dict[str, dict[str, Any]]) -> None:
    result = outcome["rendered"]
    assert result["ok"], result["error"]
    engine = result["engine"]
    assert (engine["max_model_len"], engine["max_num_seqs"], engine["tensor_parallel_size"]) == (8192, 64, 1)
    assert engine["served_model_name"] == sc.LLAMA_3_1_8B
    assert engine["speculative"]["num_speculative_tokens"] == 3


@pytest.mark.parametrize(("case_id", "extra", "field", "value"), OVERRIDES, ids=[o[0] for o in OVERRIDES])
def test_each_refused_spelling_would_override_the_plan(
    outcome: dict[str, dict[str, Any]], case_id: str, extra: list[str], field: str, value: Any, tmp_path: Path
) -> None:
    result = outcome[case_id]
    if field == "error":
        assert not result["ok"]
        assert value in str(result["error"]), result["error"]
    else:
        assert result["ok"], f"vLLM refused {extra}: {result['stage']}: {result['error']}"
        assert _field(result["engine"], field) == value, "vLLM reads the token as the rendered flag"
    spec = json.loads(json.dumps(SPEC))
    spec["engine"]["extraArgs"] = [token.format(config=tmp_path / "serve.yaml") for token in extra]
    with pytest.raises(UnsupportedCombination) as refused:
        render_command(v1alpha1.parse_spec(spec))
    assert refused.value.field == "spec.engine.extraArgs[0]"


@pytest.mark.parametrize(("case_id", "extra"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted_extra_args_leave_rendered_values_alone(
    outcome: dict[str, dict[str, Any]], case_id: str, extra: list[str]
) -> None:
    spec = json.loads(json.dumps(SPEC))
    spec["engine"]["extraArgs"] = extra
    argv = render_command(v1alpha1.parse_spec(spec)).argv
    assert list(argv[-len(extra) :]) == extra
    result = outcome[case_id]
    assert result["ok"], result["error"]
    rendered = outcome["rendered"]["engine"]
    for key in ("max_model_len", "max_num_seqs", "tensor_parallel_size", "served_model_name", "speculative"):
        assert result["engine"][key] == rendered[key], key


def test_data_parallel_spellings_are_what_vllm_reads(outcome: dict[str, dict[str, Any]]) -> None:
    """The spellings specpilot reads as data parallel 2 (the batch-size schedule is then off) are exactly those vLLM's
    parser reads as 2; the others are not data parallel > 1 there (a parse error or an engine refusal counts too)."""
    for extra in DATA_PARALLEL_2:
        result = outcome[f"dp2: {' '.join(extra)}"]
        assert result["ok"], (extra, result["stage"], result["error"])
        assert result["engine"]["data_parallel_size"] == 2, extra
    for extra in DATA_PARALLEL_1:
        result = outcome[f"dp1: {' '.join(extra)}"]
        assert not result["ok"] or result["engine"]["data_parallel_size"] == 1, (extra, result["engine"])


def test_kv_cache_dtype_enum_is_exactly_vllms_closed_set(outcome: dict[str, dict[str, Any]]) -> None:
    for dtype in v1alpha1.KvCacheDtype:
        result = outcome[f"kv-{dtype.value}"]
        # float16 is a valid value that this bfloat16 model refuses as a combination; no value is refused as such
        assert result["ok"] or "Invalid kv_cache_dtype" not in str(result["error"]), (dtype, result["error"])
        assert not result["ok"] or result["engine"]["kv_cache_dtype"] == dtype.value
    refused = outcome["kv-int3"]
    assert not refused["ok"]
    error = str(refused["error"])
    assert "Invalid kv_cache_dtype: 'int3'" in error
    listed = set(re.findall(r"'([a-z0-9_]+)'", error.split("Valid values are:", 1)[1].split("]", 1)[0]))
    assert listed == {d.value for d in v1alpha1.KvCacheDtype}


def test_dtype_enum_is_exactly_vllms_choices(outcome: dict[str, dict[str, Any]]) -> None:
    assert set(outcome["options"]["choices"]["dtype"]) == {d.value for d in v1alpha1.Dtype}


def test_a_name_starting_with_a_dash_becomes_a_flag_so_the_api_refuses_it(
    outcome: dict[str, dict[str, Any]],
) -> None:
    result = outcome["name-as-flag"]
    served = (result["engine"] or {}).get("served_model_name")
    assert served != "--enforce-eager", "vLLM never reads it as the name"
    spec = json.loads(json.dumps(SPEC))
    spec["engine"]["servedModelName"] = "--enforce-eager"
    with pytest.raises(v1alpha1.InvalidSpec, match=r"spec\.engine\.servedModelName: must be printable ASCII"):
        v1alpha1.parse_spec(spec)


# vLLM 0.33's dests that the rendered command sets, or that specpilot refuses outright (--config, --disable-log-stats)
RENDERED_DESTS = {
    "model",
    "served_model_name",
    "port",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "dtype",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "kv_cache_dtype",
    "quantization",
    "revision",
    "enable_prefix_caching",
    "shutdown_timeout",  # spec.rollout.drainSeconds
    "speculative_config",
    "spec_method",  # 0.33's shortcuts into the speculative config
    "spec_model",
    "spec_tokens",
    "disable_log_stats",
    "config",
}


def _spellings(flag: str, every: list[str]) -> list[str]:
    """Every token vLLM's parser reads as `flag`: itself, each prefix argparse expands to it alone (allow_abbrev),
    each of those with "=value", and for long flags the underscore form and a dotted key."""
    prefixes = [flag[:n] for n in range(2, len(flag) + 1) if [o for o in every if o.startswith(flag[:n])] == [flag]]
    tokens = [*prefixes, *(p + "=1" for p in prefixes)]
    if flag.startswith("--"):
        tokens += ["--" + t[2:].replace("-", "_") for t in tokens] + [flag + ".key", flag + ".key=1"]
    return tokens


def test_every_spelling_of_every_rendered_flag_in_vllms_parser_is_refused(
    outcome: dict[str, dict[str, Any]],
) -> None:
    """The class, not examples: all option strings of the real parser, not a list written by hand."""
    options: dict[str, list[str]] = outcome["options"]["options"]
    every = [flag for flags in options.values() for flag in flags]
    assert set(options) >= RENDERED_DESTS, RENDERED_DESTS - set(options)
    slipped = [
        (dest, token)
        for dest in sorted(RENDERED_DESTS)
        for flag in options[dest]
        for token in _spellings(flag, every)
        if extra_arg_problem(token) is None
    ]
    assert slipped == []
    checked = sum(len(_spellings(f, every)) for d in RENDERED_DESTS for f in options[d])
    print(f"\n{checked} spellings of {len(RENDERED_DESTS)} rendered flags refused; {len(every)} option strings in all")


def test_no_other_flag_of_vllms_parser_is_refused(outcome: dict[str, dict[str, Any]]) -> None:
    """The refusal is exact: every other vLLM 0.33 flag, spelled out, stays usable in extraArgs."""
    options: dict[str, list[str]] = outcome["options"]["options"]
    refused = [
        (dest, flag, extra_arg_problem(flag))
        for dest, flags in sorted(options.items())
        if dest not in RENDERED_DESTS
        for flag in flags
        if extra_arg_problem(flag) is not None
    ]
    assert refused == []

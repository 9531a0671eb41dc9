"""Careless and hostile files through the `specpilot` entry point: one line naming the file, non-zero, no traceback.

Every case runs `main([...])` in-process, the code path a user's shell reaches, and checks the exit status and what
was printed: exactly one error line per bad input that names the file and the problem.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specpilot.cli.evaluate import EXIT_INVALID_INPUT, EXIT_PROMETHEUS_FAILED
from specpilot.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama-8b-single-gpu.yaml"
GOOD = EXAMPLE.read_text()

LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdef", "bcdefg", strict=True)
)

BAD_INPUTS: list[tuple[str, bytes, str]] = [
    ("non-utf8", b"kind: SpeculativeDeployment\nmetadata: {name: \xff\xfe}\n", "not UTF-8 text (invalid byte 0xff"),
    ("syntax", b"kind: SpeculativeDeployment\nspec: [1, 2\n", "YAML error: while parsing a flow sequence"),
    ("undefined-alias", b"kind: SpeculativeDeployment\nspec: *nowhere\n", "found undefined alias 'nowhere'"),
    ("unsafe-tag", b"kind: !!python/object/apply:os.system [id]\n", "could not determine a constructor for the tag"),
    ("binary-tag", b"kind: SpeculativeDeployment\nmetadata: {labels: {a: !!binary aGk=}}\n", "!!binary (bytes)"),
    ("set-tag", b"kind: SpeculativeDeployment\nmetadata: {finalizers: !!set {a}}\n", "!!set has no JSON form"),
    ("omap-tag", b"kind: SpeculativeDeployment\nspec: !!omap [{a: 1}]\n", "!!omap has no JSON form"),
    ("deep", b"kind: SpeculativeDeployment\nspec: " + b"[" * 10_000 + b"]" * 10_000 + b"\n", "nesting deeper than 64"),
    ("laughs", LAUGHS.encode(), "expands to more than 100000 nodes through aliases"),
    ("recursive", b"&a [*a]\n", "recursive alias"),
    ("duplicate", b"kind: SpeculativeDeployment\nkind: Deployment\n", "duplicate key 'kind' at line 2"),
    ("huge", b"kind: SpeculativeDeployment\n" + b"#" * (4 * 1024 * 1024), "larger than 4 MiB"),
    ("empty", b"", "no SpeculativeDeployment documents found"),
    ("other-kind", b"apiVersion: v1\nkind: ConfigMap\n", "no SpeculativeDeployment documents found"),
]


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text
    assert 'File "' not in text


@pytest.mark.parametrize(("case", "content", "problem"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
@pytest.mark.parametrize("command", ["validate", "render", "plan", "evaluate"])
def test_bad_files_get_one_line_naming_file_and_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, case: str, content: bytes, problem: str
) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(content)
    code = main([command, str(path)])
    out, err = capsys.readouterr()
    assert code != 0
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert str(path) in lines[0]
    assert problem in lines[0]
    _no_traceback(out + err)


@pytest.mark.parametrize(
    ("make_path", "problem"),
    [
        (lambda tmp: tmp / "missing.yaml", "no such file"),
        (lambda tmp: tmp, "is a directory"),
        (lambda tmp: tmp / "file.yaml" / "below", "cannot read: Not a directory"),
    ],
    ids=["missing", "directory", "unreadable"],
)
@pytest.mark.parametrize("command", ["validate", "render", "plan", "evaluate"])
def test_paths_that_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, make_path: object, problem: str
) -> None:
    (tmp_path / "file.yaml").write_text(GOOD)
    path = make_path(tmp_path)  # type: ignore[operator]
    assert main([command, str(path)]) != 0
    out, err = capsys.readouterr()
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert str(path) in lines[0]
    assert problem in lines[0]
    _no_traceback(out + err)


@pytest.mark.parametrize("command", ["validate", "render", "plan", "evaluate"])
def test_a_file_without_read_permission(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Mode 000. Root reads anything, so as root the read runs under an unprivileged effective uid (restored after);
    the parser is built first, since that uid cannot read the interpreter's own lazily imported modules."""
    path = tmp_path / "locked.yaml"
    path.write_text(GOOD)
    path.chmod(0)
    build_parser()
    root = os.geteuid() == 0
    if root:
        os.seteuid(65534)
    try:
        code = main([command, str(path)])
    finally:
        if root:
            os.seteuid(0)
    out, err = capsys.readouterr()
    assert code != 0
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert f"{path}: permission denied" in lines[0]
    _no_traceback(out + err)


def test_validate_checks_every_file_when_one_is_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [\n")
    assert main(["validate", str(bad), str(EXAMPLE), str(tmp_path / "missing.yaml")]) == 1
    out, err = capsys.readouterr()
    assert f"{EXAMPLE}: llama-8b-single-gpu: valid" in out
    assert f"{bad}: YAML error" in err
    assert f"{tmp_path / 'missing.yaml'}: no such file" in err


def test_stdin_and_list_exports(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(GOOD)
    export = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [doc, {**doc, "metadata": {"name": "two"}}]})
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(export.encode())))
    assert main(["validate", "-"]) == 0
    out = capsys.readouterr().out
    assert "-: llama-8b-single-gpu: valid" in out
    assert "-: two: valid" in out


@pytest.mark.parametrize("command", ["render", "plan"])
def test_render_and_plan_fail_without_a_speculative_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main([command, str(path)]) == 1
    assert "no SpeculativeDeployment documents found" in capsys.readouterr().err


TOO_BIG = GOOD.replace("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", 1)


def test_render_refuses_a_plan_that_does_not_fit_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(TOO_BIG)
    assert main(["render", str(path)]) == 1
    err = capsys.readouterr().err
    assert "[Error DoesNotFit]" in err
    assert str(path) in err
    assert main(["render", str(path), "--allow-memory-overcommit"]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert "Deployment" in kinds
    annotated = yaml.safe_load(TOO_BIG)
    annotated["metadata"]["annotations"] = {"specpilot.dev/allow-memory-overcommit": "true"}
    path.write_text(yaml.safe_dump(annotated))
    assert main(["render", str(path)]) == 0


@pytest.mark.parametrize("name", ["Bad_Name", "x" * 51, "-x", "9lives"])
def test_render_refuses_an_invalid_metadata_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    doc = yaml.safe_load(GOOD)
    doc["metadata"]["name"] = name
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["render", str(path)]) == 1
    assert "metadata.name: metadata.name must be a DNS-1035 label" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        ("latest", "--vllm-version: must be a vLLM version such as 0.33.0"),
        ("0.1.0", "spec.engine.version: vLLM 0.1.0 is older than the oldest supported version"),
        ("--help", "--vllm-version: must be a vLLM version"),
    ],
)
def test_vllm_version_flag_is_checked_like_the_field(
    capsys: pytest.CaptureFixture[str], version: str, problem: str
) -> None:
    assert main(["render", str(EXAMPLE), f"--vllm-version={version}"]) == 1
    assert problem in capsys.readouterr().err


def test_evaluate_without_prometheus_is_a_distinct_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens on the port: exit 3 (Prometheus failed), not 0 with a "Keep" decision."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    doc = yaml.safe_load(GOOD)
    doc["status"] = {"autotune": {"version": 1, "streak": {"key": "k"}}, "effective": "not an object"}
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc))
    code = main(["evaluate", str(path), "--prometheus", f"http://127.0.0.1:{port}", "--timeout", "2s"])
    out, err = capsys.readouterr()
    assert code == EXIT_PROMETHEUS_FAILED
    assert "error: Prometheus is unreachable (transport: ConnectError" in err
    assert "status is malformed" in err  # reported and ignored, never a crash
    assert "decision Keep" in out


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--prometheus", "http://prometheus:99999"], "port 1-65535"),
        (["--prometheus", "https://p:9090", "--header", "X-Scope-OrgID=a\r\nX: y"], "no CR/LF"),
        (["--prometheus", "https://p:9090", "--header", "X-Scope-OrgID=équipe"], "no non-ASCII"),
        (["--prometheus", "http://p:9090", "--username", "u", "--password-file", "{pw}"], "plain http://"),
        (["--prometheus", "https://p:9090", "--ca-file", "{ca}"], "not a PEM CA bundle"),
        (["--prometheus", "https://p:9090", "--ca-file", "{missing}"], "--ca-file"),
        (["--prometheus", "https://p:9090", "--timeout", "0s"], "timeout must be positive"),
        (["--prometheus", "https://p:9090", "--timeout", "1000h"], "timeout must be positive and at most 1m"),
        (["--prometheus", "https://p:9090", "--timeout", "soon"], "--timeout: 'soon' is not a duration"),
    ],
)
def test_evaluate_refuses_connections_that_cannot_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], problem: str
) -> None:
    (tmp_path / "pw").write_text("secret\n")
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    paths = {"pw": tmp_path / "pw", "ca": tmp_path / "ca.pem", "missing": tmp_path / "nope.pem"}
    args = [f.format(**paths) for f in flags]
    assert main(["evaluate", str(EXAMPLE), *args]) == EXIT_INVALID_INPUT
    out, err = capsys.readouterr()
    assert problem in err, err
    assert "secret" not in out + err
    _no_traceback(out + err)


def test_crd_output_that_cannot_be_written_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for target, problem in [(tmp_path, "Is a directory"), (tmp_path / "no" / "crd.yaml", "No such file or directory")]:
        assert main(["crd", "-o", str(target)]) == 1
        out, err = capsys.readouterr()
        assert err.strip() == f"{target}: cannot write: {problem}"
        _no_traceback(out + err)


@pytest.mark.parametrize(("command", "sink"), [("render", "full-disk"), ("plan", "closed-pipe")])
def test_output_that_cannot_be_written_is_no_traceback(command: str, sink: str) -> None:
    """A full disk gets one line; a reader that went away (`| head`) gets silence; both exit 1, never a traceback.

    Runs the real entry point in a child process: only there does stdout have a file descriptor to fail. Both sinks
    end in the one place every command returns through (cli.main), so one command each covers them all."""
    argv = [sys.executable, "-m", "specpilot", command, *([] if command == "crd" else [str(EXAMPLE)])]
    if sink == "full-disk":
        with open("/dev/full", "wb") as full:
            proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, check=False, timeout=60)
        assert proc.returncode == 1
        assert proc.stderr.strip() == f"specpilot {command}: error: No space left on device", proc.stderr
    else:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout is not None
        child.stdout.close()  # long before the child has imported anything, let alone written
        _, stderr = child.communicate(timeout=60)
        assert child.returncode == 1, stderr
        assert stderr == ""

"""Prometheus connections an administrator made available, and the only place the operator reads credentials.

The security model (docs/security.md): a SpeculativeDeployment never names a Secret. An administrator lists
connections in the chart (value `prometheusConnections`); the chart writes them to a JSON file for the operator and
mounts each connection's Secret into the operator pod, so the operator's RBAC reads no Secret at all and a CR author
can use credentials only by naming a connection the administrator allowed for their namespace. Credentials never go
over plain HTTP unless the connection says `allowPlainHTTP`, and they go only to the connection's own URL (httpx
does not follow redirects). A CR may also give a `url` of its own, queried without any credentials, unless the
administrator turned that off (`allowSpecURLs: false`).

The files are read at each evaluation, so a rotated Secret (the kubelet updates mounted Secrets) takes effect
without a restart.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from specpilot.adapters.prom import PrometheusClient, PrometheusConnection, check_ca_bundle
from specpilot.api.durations import parse_duration
from specpilot.api.v1alpha1 import (
    DNS_LABEL_PATTERN,
    HEADER_VALUE_PATTERN,
    URL_PATTERN,
    PrometheusSpec,
    describe_validation_error,
)
from specpilot.autotune.signals.measurements import RawResult

CONNECTIONS_ENV = "SPECPILOT_PROMETHEUS_CONNECTIONS"
TOKEN_FILE = "token"
USERNAME_FILE = "username"
PASSWORD_FILE = "password"
CA_FILE = "ca.crt"


class ConnectionsError(ValueError):
    """The administrator's connections file is unusable (the operator refuses to start with it)."""


class ConnectionConfig(BaseModel):
    """One administrator-defined Prometheus connection (an entry of the chart's prometheusConnections)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True)

    url: str = Field(min_length=1, max_length=2048, pattern=URL_PATTERN)
    credentials_dir: str | None = Field(None, description="Where the connection's Secret is mounted.")
    namespaces: list[Annotated[str, Field(pattern=DNS_LABEL_PATTERN)]] = Field(
        default_factory=list,
        description="Namespaces whose SpeculativeDeployments may use it; empty: every watched namespace.",
    )
    headers: dict[str, Annotated[str, Field(pattern=HEADER_VALUE_PATTERN)]] = Field(default_factory=dict)
    insecure_skip_verify: bool = False
    allow_plain_http: bool = Field(False, alias="allowPlainHTTP")

    @model_validator(mode="after")
    def _credentials_need_tls(self) -> ConnectionConfig:
        if self.credentials_dir and self.url.startswith("http://") and not self.allow_plain_http:
            raise ValueError(
                f"url {self.url} is plain http:// but the connection has credentials: use https:// or set "
                "allowPlainHTTP: true to send them unencrypted"
            )
        return self


class ConnectionsFile(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True)

    allow_spec_urls: bool = Field(True, alias="allowSpecURLs")
    connections: dict[Annotated[str, Field(pattern=DNS_LABEL_PATTERN)], ConnectionConfig] = Field(default_factory=dict)


@dataclass(frozen=True)
class Registry:
    """The connections of one operator; empty (spec URLs only) when no file was configured."""

    connections: Mapping[str, ConnectionConfig] = field(default_factory=dict)
    allow_spec_urls: bool = True

    @classmethod
    def load(cls, path: str | Path) -> Registry:
        """Read and check the file; ConnectionsError with one line per problem."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise ConnectionsError(f"{path}: cannot read Prometheus connections: {err}") from None
        try:
            parsed = ConnectionsFile.model_validate(raw)
        except ValidationError as err:
            problems = describe_validation_error(err, prefix="")
            raise ConnectionsError(f"{path}: " + "; ".join(problems)) from None
        return cls(connections=dict(parsed.connections), allow_spec_urls=parsed.allow_spec_urls)


@dataclass(frozen=True)
class Resolution:
    """What a spec's prometheus block resolves to: a connection, or the reason there is none; plus warnings."""

    connection: PrometheusConnection | None
    problem: str | None = None
    warnings: tuple[tuple[str, str], ...] = ()  # (reason, message) for Warning events


def _read(directory: Path, name: str) -> str | None:
    path = directory / name
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8").strip()


def _credentials(name: str, config: ConnectionConfig) -> dict[str, str | None]:
    """The connection's mounted Secret: a token, or username and password, and an optional CA bundle."""
    if not config.credentials_dir:
        return {}
    directory = Path(config.credentials_dir)
    try:
        values = {
            "bearer_token": _read(directory, TOKEN_FILE),
            "username": _read(directory, USERNAME_FILE),
            "password": _read(directory, PASSWORD_FILE),
            "ca_pem": _read(directory, CA_FILE),
        }
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"connection {name}: cannot read its credentials: {type(err).__name__}") from None
    if values["ca_pem"]:
        check_ca_bundle(values["ca_pem"], f"connection {name}: {CA_FILE}")
    return values


def resolve(registry: Registry, spec: PrometheusSpec, namespace: str) -> Resolution:
    """The connection a CR in `namespace` may use for `spec`, enforcing the administrator's limits."""
    timeout = parse_duration(spec.timeout)
    if spec.connection is None:
        if not registry.allow_spec_urls:
            return Resolution(
                None,
                "spec.autotune.prometheus.url: the administrator allows only named connections "
                f"(choose one of: {', '.join(sorted(registry.connections)) or 'none configured'})",
            )
        if spec.url is None:  # the API refuses this (exactly one of url and connection); said here for safety
            return Resolution(None, "spec.autotune.prometheus needs exactly one of url or connection")
        warnings: tuple[tuple[str, str], ...] = ()
        if spec.insecure_skip_verify:
            warnings = (
                (
                    "InsecurePrometheusTLS",
                    f"TLS verification is off for {spec.url} (spec.autotune.prometheus.insecureSkipVerify)",
                ),
            )
        connection = PrometheusConnection(
            url=spec.url, timeout_s=timeout, insecure_skip_verify=spec.insecure_skip_verify, headers=spec.headers
        )
        return Resolution(connection, warnings=warnings)
    name = spec.connection
    config = registry.connections.get(name)
    if config is None:
        known = ", ".join(sorted(registry.connections)) or "none configured"
        return Resolution(None, f"spec.autotune.prometheus.connection: no connection named {name!r} (known: {known})")
    if config.namespaces and namespace not in config.namespaces:
        return Resolution(
            None, f"spec.autotune.prometheus.connection: connection {name!r} is not available in namespace {namespace}"
        )
    try:
        credentials = _credentials(name, config)
        connection = PrometheusConnection(
            url=config.url,
            timeout_s=timeout,
            insecure_skip_verify=config.insecure_skip_verify,
            headers=config.headers,
            allow_plain_http=config.allow_plain_http,
            bearer_token=credentials.get("bearer_token"),
            username=credentials.get("username"),
            password=credentials.get("password"),
            ca_pem=credentials.get("ca_pem"),
        )
    except ValueError as err:
        message = str(err)
        return Resolution(None, message if message.startswith("connection ") else f"connection {name}: {message}")
    return Resolution(connection)


class UnavailablePrometheus:
    """Answers every query with the reason no connection could be made, so measurements say why they are Errors."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def query(self, promql: str, at: datetime | None = None) -> RawResult:
        return RawResult.from_transport_error(f"no Prometheus connection: {self.reason}")

    def __enter__(self) -> UnavailablePrometheus:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


_registry: Registry | None = None


def configure(path: str | None) -> Registry:
    """Load the administrator's file (or none) once at start-up; ConnectionsError stops the operator with a reason."""
    global _registry
    _registry = Registry.load(path) if path else Registry()
    return _registry


def registry() -> Registry:
    """The configured registry; loaded from $SPECPILOT_PROMETHEUS_CONNECTIONS when configure() was not called."""
    global _registry
    if _registry is None:
        _registry = Registry.load(os.environ[CONNECTIONS_ENV]) if os.environ.get(CONNECTIONS_ENV) else Registry()
    return _registry


def open_client(spec: PrometheusSpec, namespace: str) -> tuple[PrometheusClient | UnavailablePrometheus, Resolution]:
    """A client for this CR's Prometheus, or one that reports why there is none; never raises for bad config."""
    resolution = resolve(registry(), spec, namespace)
    if resolution.connection is None:
        return UnavailablePrometheus(resolution.problem or "unknown"), resolution
    return PrometheusClient(resolution.connection), resolution

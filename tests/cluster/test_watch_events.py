"""kopf's watch, as the operator runs it (`adapters.watch_events` installed), delivers objects without
metadata.managedFields, on the real API server: the memory kopf holds per event is the object minus its field owners.

The same object read back with kubectl, and the same event through kopf's unwrapped watch, do carry managedFields:
the absence is the wrapper's doing, not a server that sent none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import auth, watching
from kopf._cogs.structs import credentials, references
from kopf._core.intents import piggybacking

from e2e.cluster.fixture import KubeCluster
from specpilot.adapters import watch_events

pytestmark = pytest.mark.cluster

CONFIG_MAPS = references.Resource(group="", version="v1", plural="configmaps", namespaced=True)


async def _event_of(uid: str, namespace: str, watch: Callable[..., Any]) -> dict[str, Any]:
    """The first event kopf's watch delivers for the object with this uid (its initial streaming, as configured)."""
    settings = kopf.OperatorSettings()
    settings.watching.initial_streaming = True  # as shell.wiring.configure sets it
    settings.watching.server_timeout = 10
    vault = credentials.Vault()
    info = piggybacking.login_with_kubeconfig(settings=settings)
    assert info is not None
    await vault.populate({"kubeconfig": info})
    auth.vault_var.set(vault)
    paused = asyncio.get_running_loop().create_future()
    stream: AsyncGenerator[Any, None] = watch(
        settings=settings, resource=CONFIG_MAPS, namespace=namespace, operator_pause_waiter=paused
    )
    try:
        async with asyncio.timeout(30):
            async for event in stream:
                if isinstance(event, dict) and event["object"]["metadata"]["uid"] == uid:
                    return dict(event)
    finally:
        await stream.aclose()
    raise AssertionError(f"no event for {uid} in {namespace}")


def test_kopf_watch_delivers_objects_without_managed_fields(
    kube_cluster: KubeCluster, kube_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "fields", "namespace": kube_namespace, "labels": {"app": "specpilot-test"}},
        "data": {f"key-{i}": "value" for i in range(20)},
    }
    kube_cluster.kubectl(
        "apply", "--server-side", "--field-manager=specpilot-test", "-f", "-", stdin=json.dumps(config_map)
    )
    stored = kube_cluster.kubectl_json("-n", kube_namespace, "get", "configmap", "fields", "--show-managed-fields")
    assert stored["metadata"]["managedFields"], "the API server keeps field owners for a server-side applied object"
    uid = stored["metadata"]["uid"]
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))

    watch_events.install()
    watch_events.install()  # idempotent: the operator module and tests may both install it
    wrapped = watching.continuous_watch
    original = wrapped.__wrapped__  # type: ignore[attr-defined]
    assert not hasattr(original, "__wrapped__"), "installed once, not wrapped twice"

    unwrapped_event = asyncio.run(_event_of(uid, kube_namespace, original))
    assert unwrapped_event["object"]["metadata"]["managedFields"], "kopf's own watch carries managedFields"

    event = asyncio.run(_event_of(uid, kube_namespace, wrapped))
    assert "managedFields" not in event["object"]["metadata"]
    assert event["object"]["data"] == config_map["data"]  # everything else as the server sent it
    assert event["object"]["metadata"]["labels"] == {"app": "specpilot-test"}

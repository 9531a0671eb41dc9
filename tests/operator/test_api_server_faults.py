"""Fault injection: the real API server failing one namespace's requests costs only that namespace's objects.

The operator (`specpilot run`, as the chart's ServiceAccount) reaches the real kube-apiserver through a proxy on
127.0.0.1 (tests/operator/api_faults.py) that forwards everything until a test switches a fault on for the victim's
namespace: status patches answered 409, 429 with Retry-After, 500, or 500 after the write was done; watch streams
cut mid-stream and their reconnects answered 429, 500 or "410 Gone: too old resource version". For each fault the
suite edits the victim's spec while the fault holds and shows that:
- the fault was met (the proxy answered it at least twice: the operator tried and tried again);
- no child was written for a decision whose status write failed (intent persisted before side effects);
- the bystander in another namespace is still evaluated (it answers a reevaluate token) while the victim fails;
- once the fault stops, the victim's status and children converge on the edit (nothing lost), the operator is
  still running and live, and it counted the failures.
Each case prints what it tried and what came of it, past pytest's output capture.
"""

from __future__ import annotations

import functools
import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from e2e.cluster.fixture import NAMESPACE_LABEL, KubeCluster
from e2e.operator_process import RunningOperator, launch_operator
from e2e.prometheus.fixture import StartPrometheus
from e2e.waiting import wait_for
from specpilot.api.v1alpha1 import ANNOTATION_REEVALUATE as REEVALUATE
from tests.operator.api_faults import Fault, FaultProxy, Seen, proxy_for, through_proxy
from tests.operator.conftest import OPERATOR_NAMESPACE, chart_rbac, service_account_kubeconfig
from tests.operator.test_fleet import fleet_member
from tests.operator.test_operator_cluster import apply, events, get

pytestmark = pytest.mark.cluster

VICTIM, BYSTANDER = "victim", "bystander"
CRS = "/speculativedeployments"
WATCH_FAILURES = "specpilot_watch_failures_total"


@dataclass
class Setup:
    cluster: KubeCluster
    operator: RunningOperator
    proxy: FaultProxy
    victim_ns: str
    bystander_ns: str
    tokens: Iterator[int]  # a fresh numSpeculativeTokens per edit, so every case's edit is a change


Tell = Callable[[str], None]


@pytest.fixture
def tell(capsys: pytest.CaptureFixture[str]) -> Tell:
    def say(line: str) -> None:
        with capsys.disabled():
            print(f"\n[api-server faults] {line}", end="")

    return say


def _namespace(cluster: KubeCluster, name: str) -> None:
    metadata = {"name": name, "labels": {NAMESPACE_LABEL: "true"}}
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    for doc in chart_rbac(cluster, name):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(doc))


@pytest.fixture(scope="module")
def setup(
    kube_cluster: KubeCluster,
    crd_installed: None,
    prometheus_factory: StartPrometheus,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    """One operator watching two namespaces through the proxy; the victim and the bystander evaluated once."""
    work = tmp_path_factory.mktemp("api-faults")
    suffix = str(int(time.time() * 1000) % 10**8)
    victim_ns, bystander_ns = f"t-faults-victim-{suffix}", f"t-faults-bystander-{suffix}"
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                               "metadata": {"name": OPERATOR_NAMESPACE}}))  # fmt: skip
    for namespace in (victim_ns, bystander_ns):
        _namespace(kube_cluster, namespace)
    prometheus = prometheus_factory([])
    proxy = proxy_for(kube_cluster.kubeconfig)
    try:
        with proxy.running():
            direct = service_account_kubeconfig(kube_cluster, work / "direct.kubeconfig")
            kubeconfig = through_proxy(direct, proxy.url, work / "proxied.kubeconfig")
            operator = launch_operator(kubeconfig, [victim_ns, bystander_ns], work / "operator.log")
            try:
                apply(kube_cluster, victim_ns, fleet_member(VICTIM, prometheus.url))
                apply(kube_cluster, bystander_ns, fleet_member(BYSTANDER, prometheus.url))
                for namespace, name in ((victim_ns, VICTIM), (bystander_ns, BYSTANDER)):
                    wait_for(f"{name} evaluated", functools.partial(_evaluated, kube_cluster, namespace, name), 120)
                yield Setup(kube_cluster, operator, proxy, victim_ns, bystander_ns, itertools.count(4))
            finally:
                operator.stop()
                if operator.process.returncode not in (0, -15):
                    print(f"operator log:\n{operator.log_tail()}")
    finally:
        for namespace in (victim_ns, bystander_ns):
            kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def _evaluated(cluster: KubeCluster, namespace: str, name: str) -> bool:
    obj = get(cluster, namespace, "specdeploy", name) or {}
    return bool(((obj.get("status") or {}).get("observed") or {}).get("evaluatedAt"))


def rendered_tokens(cluster: KubeCluster, namespace: str) -> int | None:
    """num_speculative_tokens on the victim's Deployment (what its pods run)."""
    deployment = get(cluster, namespace, "deployment", VICTIM)
    if deployment is None:
        return None
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    return int(json.loads(command[command.index("--speculative-config") + 1])["num_speculative_tokens"])


def intent_tokens(cluster: KubeCluster, namespace: str) -> int | None:
    """num_speculative_tokens the victim's status records as the running intent."""
    obj = get(cluster, namespace, "specdeploy", VICTIM) or {}
    value = ((obj.get("status") or {}).get("effective") or {}).get("numSpeculativeTokens")
    return int(value) if value is not None else None


def converged(cluster: KubeCluster, namespace: str, tokens: int) -> bool:
    obj = get(cluster, namespace, "specdeploy", VICTIM) or {}
    status = obj.get("status") or {}
    return (
        status.get("observedGeneration") == obj["metadata"]["generation"]
        and intent_tokens(cluster, namespace) == tokens
        and rendered_tokens(cluster, namespace) == tokens
    )


def edit_victim(s: Setup) -> int:
    tokens = next(s.tokens)
    patch = json.dumps({"spec": {"speculation": {"numSpeculativeTokens": tokens}}})
    s.cluster.kubectl("-n", s.victim_ns, "patch", "specdeploy", VICTIM, "--type=merge", "-p", patch)
    return tokens


def bystander_answers(s: Setup, token: str) -> float:
    """The bystander is still evaluated: a new reevaluate token is answered (status.lastHandledReevaluate).
    Returns the seconds it took."""
    started = time.monotonic()
    s.cluster.kubectl("-n", s.bystander_ns, "annotate", "--overwrite", "specdeploy", BYSTANDER, f"{REEVALUATE}={token}")

    def handled() -> bool:
        obj = get(s.cluster, s.bystander_ns, "specdeploy", BYSTANDER) or {}
        return (obj.get("status") or {}).get("lastHandledReevaluate") == token

    wait_for(f"the bystander answers {token}", handled, 60)
    return time.monotonic() - started


def live(operator: RunningOperator) -> bool:
    return (
        operator.process.poll() is None
        and httpx.get(f"http://127.0.0.1:{operator.health_port}/healthz", timeout=5).status_code == 200
    )


def status_patch(namespace: str) -> Callable[[Seen], bool]:
    return lambda seen: (
        seen.method == "PATCH" and seen.in_namespace(namespace) and seen.path.endswith(f"{CRS}/{VICTIM}/status")
    )


def cr_watch(namespace: str, *, resuming: bool | None = None) -> Callable[[Seen], bool]:
    """Watches of the victim's namespace's SpeculativeDeployments; `resuming`: only those from a resourceVersion
    (True) or only fresh ones, a re-list (False)."""

    def matches(seen: Seen) -> bool:
        ours = seen.method == "GET" and seen.watch and seen.path.endswith(f"/namespaces/{namespace}{CRS}")
        return ours and (resuming is None or ("resourceVersion" in seen.query) == resuming)

    return matches


@dataclass(frozen=True)
class WriteCase:
    name: str
    answer: int
    retry_after: int | None
    after_forwarding: bool
    counted_as: str  # the operator's metric that counts this failure
    told: bool  # whether the victim gets a ReconcileFailed event (a 409 is a stale decision, decided again quietly)


WRITE_CASES = (
    WriteCase("409", 409, None, False, 'specpilot_reconciles_total{result="stale"', told=False),
    WriteCase("429", 429, 1, False, 'specpilot_object_failures_total{stage="reconcile"}', told=True),
    WriteCase("500", 500, None, False, 'specpilot_object_failures_total{stage="reconcile"}', told=True),
    WriteCase("500-lost", 500, None, True, 'specpilot_object_failures_total{stage="reconcile"}', told=True),
)


def counted(operator: RunningOperator, what: str) -> float:
    """A counter's sum over its series whose labels include `what`'s (`name{label="value"`)."""
    name, _, labels = what.partition("{")
    wanted = [part for part in labels.rstrip("}").split(",") if part]
    return sum(
        v for k, v in operator.metrics().items() if k.startswith(name + "{") and all(label in k for label in wanted)
    )


@pytest.mark.parametrize("case", WRITE_CASES, ids=[c.name for c in WRITE_CASES])
def test_a_failing_status_write_costs_only_its_object_and_loses_nothing(
    setup: Setup, case: WriteCase, tell: Tell
) -> None:
    s = setup
    fault = Fault(
        f"status patch {case.name}",
        status_patch(s.victim_ns),
        answer=case.answer,
        retry_after=case.retry_after,
        after_forwarding=case.after_forwarding,
    )
    s.proxy.faults.append(fault)
    before = rendered_tokens(s.cluster, s.victim_ns)
    counted_before = counted(s.operator, case.counted_as)
    with s.proxy.injecting(fault):
        tokens = edit_victim(s)
        wait_for(f"{fault.name} met twice", lambda: fault.hits >= 2, 60)
        # Status first: pods may run the edit only once the status says so (read the status after the pods).
        running = rendered_tokens(s.cluster, s.victim_ns)
        recorded = intent_tokens(s.cluster, s.victim_ns)
        if not case.after_forwarding:
            assert running == before, "a child was written for a decision whose status write failed"
        assert running != tokens or recorded == tokens, "pods run an intent the status does not record"
        took = bystander_answers(s, f"during-{case.name}")
        hits = fault.hits
    wait_for("the victim converges on the edit", lambda: converged(s.cluster, s.victim_ns, tokens), 60)
    failures = counted(s.operator, case.counted_as) - counted_before
    told = [
        e["message"]
        for e in events(s.cluster, s.victim_ns, VICTIM)
        if e["reason"] == "ReconcileFailed" and f"(HTTP {case.answer})" in e["message"]
    ]
    tell(
        f"status patches of {VICTIM} answered {fault.describe()}: met {hits} times; the pods kept K={running} "
        f"while the edit's (K={tokens}) status write failed; the bystander answered a reevaluate in {took:.1f} s; "
        f"after: converged on K={tokens}, operator live, {case.counted_as.split('{')[0]} +{failures:g}"
        + (f"; told: {told[0][:160]}" if told else "")
    )
    assert live(s.operator), "the operator is still running and live"
    assert failures >= 1, f"{case.counted_as} counts the failures"
    if case.told:
        assert told, "the victim is told why it is not reconciled (a ReconcileFailed event naming the answer)"


@dataclass(frozen=True)
class WatchCase:
    name: str
    what: str
    reconnect: Fault | None  # how the reconnects of the cut watch are answered
    relists: bool  # whether the operator must list afresh (its watch failed: expired, or an ERROR event)
    counted: bool = False  # whether specpilot_watch_failures_total counts it (a failure other than expiry)


def watch_cases(namespace: str) -> list[WatchCase]:
    resuming = cr_watch(namespace, resuming=True)
    return [
        WatchCase("cut", "the CR watch cut mid-stream", None, False),
        WatchCase(
            "cut-429",
            "the CR watch cut, its reconnects answered 429 with Retry-After: 1",
            Fault("watch 429", cr_watch(namespace), answer=429, retry_after=1),
            False,
        ),
        WatchCase(
            "cut-500",
            "the CR watch cut, its reconnects answered 500",
            Fault("watch 500", cr_watch(namespace), answer=500),
            False,
        ),
        WatchCase(
            "cut-410",
            "the CR watch cut, its resumption answered 410 Gone (expired resourceVersion)",
            Fault("watch 410", resuming, watch_error=410),
            True,
        ),
        WatchCase(
            "cut-error-500",
            "the CR watch cut, its reconnects answered 200 and an ERROR event 500 (a storage error)",
            Fault("watch error event 500", cr_watch(namespace), watch_error=500),
            True,
            counted=True,
        ),
    ]


WATCH_CASES = [c.name for c in watch_cases("")]


@pytest.mark.parametrize("name", WATCH_CASES)
def test_a_broken_watch_loses_no_edit(setup: Setup, name: str, tell: Tell) -> None:
    s = setup
    case = next(c for c in watch_cases(s.victim_ns) if c.name == name)
    faults = [case.reconnect] if case.reconnect is not None else []
    s.proxy.faults.extend(faults)
    relists_before = s.proxy.count(cr_watch(s.victim_ns, resuming=False))
    failures_before = counted(s.operator, WATCH_FAILURES)
    with s.proxy.injecting(*faults):
        wait_for("the victim's CR watch open", lambda: s.proxy.cut_watches(cr_watch(s.victim_ns)), 30)
        tokens = edit_victim(s)  # made while the watch is down: only a reconnect (or a re-list) can deliver it
        if case.reconnect is not None:
            reconnect, needed = case.reconnect, 1 if case.relists else 2  # a failed watch is re-listed at once
            wait_for(f"{reconnect.name} met {needed} times", lambda: reconnect.hits >= needed, 60)
        took = bystander_answers(s, f"during-watch-{name}")
        hits = case.reconnect.hits if case.reconnect is not None else 0
    wait_for("the victim converges on the edit", lambda: converged(s.cluster, s.victim_ns, tokens), 90)
    relists = s.proxy.count(cr_watch(s.victim_ns, resuming=False)) - relists_before
    failures = counted(s.operator, WATCH_FAILURES) - failures_before
    tell(
        f"{case.what}"
        + (f" (met {hits} times)" if case.reconnect is not None else "")
        + f"; an edit (K={tokens}) made meanwhile; the bystander answered a reevaluate in {took:.1f} s; after: "
        f"converged on K={tokens}, {relists} fresh list(s), operator live, {WATCH_FAILURES} +{failures:g}"
    )
    assert live(s.operator), "the operator is still running and live"
    if case.relists:
        assert relists >= 1, "a failed or expired watch is followed by a fresh list"
    assert (failures >= 1) == case.counted, "a failed watch is counted; an expired or cut one is routine"


GONE = 'specpilot_reconciles_total{result="gone"'


def test_an_object_deleted_while_the_watch_was_down_is_forgotten(setup: Setup, tell: Tell) -> None:
    """A re-list delivers what exists, never what went away: the operator learns it from the 404 of its next status
    write and forgets the object, instead of evaluating and reconciling it every tick forever."""
    s = setup
    url = (get(s.cluster, s.victim_ns, "specdeploy", VICTIM) or {})["spec"]["autotune"]["prometheus"]["url"]
    apply(s.cluster, s.victim_ns, fleet_member("ghost", url))
    wait_for("ghost evaluated", functools.partial(_evaluated, s.cluster, s.victim_ns, "ghost"), 60)
    refused = Fault("watch 500", cr_watch(s.victim_ns), answer=500)
    expired = Fault("watch 410", cr_watch(s.victim_ns, resuming=True), watch_error=410)
    s.proxy.faults.extend([refused, expired])
    gone_before = counted(s.operator, GONE)
    with s.proxy.injecting(refused):
        wait_for("the victim's CR watch open", lambda: s.proxy.cut_watches(cr_watch(s.victim_ns)), 30)
        s.cluster.kubectl("-n", s.victim_ns, "delete", "specdeploy", "ghost")  # its DELETED event is never seen
        wait_for("watch 500 met twice", lambda: refused.hits >= 2, 60)
    with s.proxy.injecting(expired):
        wait_for("watch 410 met", lambda: expired.hits >= 1, 60)
    wait_for("the ghost's status write answered 404", lambda: counted(s.operator, GONE) > gone_before, 60)
    gone_after = counted(s.operator, GONE)
    took = bystander_answers(s, "after-ghost")  # rounds and passes ran meanwhile
    time.sleep(2 * 2.0)  # two more ticks
    gone_later = counted(s.operator, GONE)
    series = [k for k in s.operator.metrics() if 'name="ghost"' in k]
    tell(
        f"an object deleted while its namespace's CR watch was refused (500) and then expired (410): status writes "
        f"answered 404: {gone_after - gone_before:g}, then {gone_later - gone_after:g} more over "
        f"{took + 4:.0f} s in which the bystander answered a reevaluate; its metric series left: {len(series)}"
    )
    assert gone_later == gone_after, "a deleted object is forgotten, not reconciled every tick"
    assert not series, series

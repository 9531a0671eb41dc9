"""Workload scenarios of the decision benchmark: arrivals, lengths, temperatures and drift over time (pure).

A scenario is a description; `arrivals(scenario, seed)` turns it into a fixed list of requests (non-homogeneous Poisson
by thinning, lognormal lengths fitted to the SpecDecode-Bench traces, a temperature drawn from the mix at the arrival
time, the drafter drift multiplier at that time). Every policy replays the same list, so comparisons are paired (common
random numbers). Rates are shares of the preset's capacity without speculation (the steady and diurnal scenarios are
defined that way), turned into requests per second by `NO_SD_CAPACITY_QPS`: what the simulator's engine completes per
second with speculation off and `max_num_seqs` always full (bench/capacity.py measures it; a unit test fails when a
refit of a preset moves it by more than 1%, so the table and with it every scenario's rate follow the model). The shares
are the former rates over the capacity this docstring stated they were set against (8B/H100 serves ~20 QPS of
ShareGPT-length requests without speculation; the 70B preset has not changed since, so its rates stand), never chosen
against any policy's behaviour.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specpilot.api.v1alpha1 import AutotuneObjective

Points = tuple[tuple[float, float], ...]  # (seconds, value), piecewise linear, flat outside


def at(points: Points, t: float) -> float:
    """Piecewise-linear value at t."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


@dataclass(frozen=True)
class Lengths:
    prompt_mu: float
    prompt_sigma: float
    output_mu: float
    output_sigma: float
    prompt_cap: int = 8192
    output_cap: int = 2048


SHAREGPT = Lengths(5.22, 1.13, 6.18, 1.03, prompt_cap=4096, output_cap=2048)  # SpecDecode-Bench ShareGPT
LONG_PROMPTS = Lengths(5.22, 0.6, 6.18, 0.8, prompt_cap=4096, output_cap=2048)  # before long-context's prompt scale

# Requests per second each preset completes without speculation, engine full (bench/capacity.py), keyed by preset,
# lengths, max_num_seqs and max_model_len. The 8B rates were written as QPS against a stated ~20 QPS; the preset
# measured 17.716 then, and 13.178 since its refit to vLLM PR #32374's batch-256 steps (roofline ridge 320 -> 220,
# KV read 39.26 -> 48 ns per token, 8 us per scheduled request), so the same QPS would have been 1.5x the load meant.
# The true profiles' entries (perturbed copies, unseen GPU classes) restate a scenario's load on them
# (`on_true_capacity`).
NO_SD_CAPACITY_QPS: dict[tuple[str, Lengths, int, int], float] = {
    ("llama8b-h100", SHAREGPT, 256, 8192): 13.178,
    ("llama70b-4xh100", SHAREGPT, 256, 8192): 10.492,
    ("llama8b-h100-perturbed-ridge-low", SHAREGPT, 256, 8192): 7.432,
    ("llama8b-h100-perturbed-ridge-high", SHAREGPT, 256, 8192): 10.136,
    ("llama70b-4xh100-perturbed-ridge-low", SHAREGPT, 256, 8192): 5.251,
    ("llama70b-4xh100-perturbed-ridge-high", SHAREGPT, 256, 8192): 8.272,
    ("llama8b-a100-like", SHAREGPT, 256, 8192): 6.423,
    ("llama8b-l4-like", SHAREGPT, 256, 8192): 0.554,
    ("llama8b-mi300x-like", SHAREGPT, 256, 8192): 18.35,
}


# The vLLM release every scenario's engines and CR run unless the scenario names another (Scenario.vllm_version).
VLLM_VERSION = "0.32.0"
# Seconds a client waits for its first token before it hangs up: the default read timeout of ingress-nginx
# (proxy-read-timeout) and an AWS ALB (idle timeout). Real clients are impatient, so every scenario has them.
CLIENT_TIMEOUT_S = 60.0
# A release between DISABLE_BY_BATCH_SIZE_REJECTED (0.17.0) and DYNAMIC_SPECULATION (0.24.0) of vllm/versions.py:
# nothing in its speculative config stops speculating at a batch size, so a configuration is on (at a K) or off.
ONOFF_ONLY_VERSION = "0.18.0"


def batched_tokens(max_model_len: int) -> int:
    """max_num_batched_tokens of the benchmark's engines: vLLM's 8192, raised to fit a longer max_model_len (to 16k)."""
    return max(8192, min(max_model_len, 16384))


def share_of_capacity(
    preset: str, shares: Points, lengths: Lengths = SHAREGPT, max_num_seqs: int = 256, max_model_len: int = 8192
) -> Points:
    """Arrival rates (QPS) for load given as shares of the preset's no-speculation capacity."""
    capacity = NO_SD_CAPACITY_QPS[(preset, lengths, max_num_seqs, max_model_len)]
    return tuple((t, share * capacity) for t, share in shares)


def on_true_capacity(rates: Points, preset: str, truth: str) -> Points:
    """Arrival rates written against `preset`'s no-speculation capacity, restated at the same share of `truth`'s: a
    deployment's traffic is sized to the hardware it runs on, whatever the CR's GPU label says. At the calibrated
    rates a slower truth is past capacity for every configuration (on the ridge-low profile 60% becomes 106%), every
    policy misses the SLO on nearly every request, and goodput compares noise."""
    ratio = capacity_ratio(preset, truth)
    return tuple((t, rate * ratio) for t, rate in rates)


def capacity_ratio(preset: str, truth: str) -> float:
    """`truth`'s no-speculation capacity over `preset`'s at ShareGPT lengths: what a load keeps its share by."""
    key = (SHAREGPT, 256, 8192)
    return NO_SD_CAPACITY_QPS[(truth, *key)] / NO_SD_CAPACITY_QPS[(preset, *key)]


@dataclass(frozen=True)
class Replay:
    """Recorded requests replayed as they came (a trace, bench/trace.py): (arrival s, prompt, output tokens) each."""

    source: str
    requests: tuple[tuple[float, int, int], ...]

    def scaled(self, factor: float) -> Replay:
        """The same shape compressed in time at the same rate: arrival times x factor, and of every 1/factor
        consecutive requests one kept (evenly spaced by index, so every minute keeps its share of the load)."""
        if factor >= 1:
            return Replay(self.source, tuple((t * factor, p, o) for t, p, o in self.requests))
        return Replay(self.source, tuple((t * factor, p, o) for t, p, o in self._thinned(factor)))

    def at_rate(self, factor: float) -> Replay:
        """The same recording at `factor` times its request rate: below 1 every 1/factor-th request kept (evenly by
        index) at its own time, above 1 every request kept and the arrival times divided by `factor`."""
        if factor >= 1:
            return Replay(self.source, tuple((t / factor, p, o) for t, p, o in self.requests))
        return Replay(self.source, self._thinned(factor))

    def _thinned(self, share: float) -> tuple[tuple[float, int, int], ...]:
        """Every 1/share-th recorded request, evenly spaced by index so every minute keeps its share."""
        return tuple(r for i, r in enumerate(self.requests) if math.floor((i + 1) * share) > math.floor(i * share))

    @property
    def last_arrival_s(self) -> float:
        return self.requests[-1][0] if self.requests else 0.0

    def repeated(self, times: int) -> Replay:
        """Every recorded request `times` times at its own arrival: the trace's load on each of `times` pods."""
        return Replay(self.source, tuple(r for r in self.requests for _ in range(times)))


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    preset: str
    method: str
    num_speculative_tokens: int
    duration_s: float
    qps: Points
    high_temperature_share: Points  # share of requests at T = 1.0; the rest split between T = 0 and T = 0.7
    alpha_multiplier: Points = ((0.0, 1.0),)
    lengths: Lengths = SHAREGPT
    prompt_scale: Points = ((0.0, 1.0),)  # multiplies prompt lengths (long-context drift)
    max_model_len: int = 8192
    max_num_seqs: int = 256
    tpot_slo_ms: float = 30.0
    ttft_slo_s: float = 2.0
    window_s: float = 300.0
    dynamic: bool = True  # the "10% over best static" target applies
    # Seconds a client waits for its first token before it hangs up and vLLM aborts the request (counted as failed);
    # None: clients wait forever. `specpilot bench --client-timeout` / `--no-client-timeout` set it for every scenario.
    client_timeout_s: float | None = CLIENT_TIMEOUT_S
    # Recorded arrivals and lengths replayed exactly instead of drawn from qps and lengths (temperatures and the
    # drift multiplier still come from the mix at each arrival time).
    replay: Replay | None = None
    # spec.speculation.enabled of the CR (False: declared without speculation)
    speculation_enabled: bool = True
    # What the same CR ran before this scenario starts, its own arrivals on its own hardware: only specpilot's
    # controller lives through it (its records carry over, as status.autotune does), every policy is judged from the
    # change on. The change itself is the user's edit, which every policy rolls out at time 0.
    previous: Scenario | None = None
    # The clock the scenario runs on: 1.0 at full length, 0.1 in quick mode. The controller's time constants that the
    # bench configures (the CR's interval, window, scrape interval, stabilization and budget interval; the cost
    # profile's restart and payback horizon) and the simulator's (scrapes, restarts) run on it
    # too, so a compressed scenario is a miniature of the full one rather than a full-speed controller in a short run.
    # Requests are not compressed (tokens take as long to generate), so neither is the drain that lets them finish.
    time_scale: float = 1.0
    # spec.autotune.objective of the CR; `specpilot bench --objective` sets it for every scenario
    objective: AutotuneObjective = AutotuneObjective.THROUGHPUT
    # spec.engine.version of the CR and the release the simulated engines run: what the configuration can express
    # (a per-batch-size schedule from 0.24.0, none from 0.10.0 to 0.23.x) follows it, for every policy and the oracle.
    vllm_version: str = VLLM_VERSION
    # spec.speculation.candidates of the CR: simulator drafters (keys of the preset's drafters, as `method` is) the
    # operator may try one pod at a time in place of the declared one; the oracle searches each of them too.
    candidates: tuple[str, ...] = ()
    # The shortest a time-compressed copy (`scaled`, `--quick`) may be: a scenario whose point needs a fixed span of
    # the controller's own (a candidate's trial: a restart, an analysis window, a promotion) is compressed less, and
    # its clock (time_scale) not at all: a trial's analysis needs a full window's sample at the scenario's traffic.
    shortest_s: float = 0.0
    # The arrival rates are the point of the scenario (thin traffic), not a share of the hardware's capacity: a run on
    # another true profile keeps them as written.
    absolute_rates: bool = False

    @property
    def drafters(self) -> tuple[str, ...]:
        """The declared drafter and the candidates: every drafter the references search."""
        return (self.method, *self.candidates)

    def scaled(self, factor: float) -> Scenario:
        """The same shape compressed in time (the quick version `make test` runs), to no less than shortest_s."""
        if factor < 1:
            factor = min(1.0, max(factor, self.shortest_s / self.duration_s))
        return replace(
            self,
            previous=None if self.previous is None else self.previous.scaled(factor),
            duration_s=self.duration_s * factor,
            qps=tuple((t * factor, v) for t, v in self.qps),
            high_temperature_share=tuple((t * factor, v) for t, v in self.high_temperature_share),
            alpha_multiplier=tuple((t * factor, v) for t, v in self.alpha_multiplier),
            prompt_scale=tuple((t * factor, v) for t, v in self.prompt_scale),
            window_s=self.window_s * factor if factor < 1 else self.window_s,
            replay=self.replay.scaled(factor) if self.replay else None,
            time_scale=self.time_scale if self.shortest_s else self.time_scale * factor,
        )


@dataclass(frozen=True)
class Arrival:
    rid: str
    at: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    temperature: float
    alpha_multiplier: float


def draw_lengths(rng: random.Random, lengths: Lengths, max_model_len: int, scale: float = 1.0) -> tuple[int, int, int]:
    """One request's prompt tokens, the output where it would stop, and its max_tokens (lognormal, capped, fitted
    into max_model_len); `scale` multiplies the prompt (long-context drift)."""
    prompt = min(
        lengths.prompt_cap * max(1.0, scale),
        max(1, round(rng.lognormvariate(lengths.prompt_mu, lengths.prompt_sigma) * scale)),
    )
    limit = max_model_len - int(prompt)
    output = max(2, min(lengths.output_cap, limit, round(rng.lognormvariate(lengths.output_mu, lengths.output_sigma))))
    return int(min(prompt, max_model_len - 2)), output, max(output, min(lengths.output_cap, max(2, limit)))


def arrivals(scenario: Scenario, seed: int) -> tuple[Arrival, ...]:
    """The request list of one scenario under one seed."""
    rng = random.Random(f"arrivals:{scenario.name}:{seed}")
    if scenario.replay is not None:
        return _replayed(scenario, scenario.replay, rng)
    peak = max(v for _, v in scenario.qps)
    out: list[Arrival] = []
    t = 0.0
    n = 0
    lengths = scenario.lengths
    while True:
        t += rng.expovariate(peak)
        if t >= scenario.duration_s:
            break
        if rng.random() * peak > at(scenario.qps, t):
            continue
        hot = rng.random() < at(scenario.high_temperature_share, t)
        temperature = 1.0 if hot else (0.0 if rng.random() < 0.5 else 0.7)
        prompt, output, max_tokens = draw_lengths(rng, lengths, scenario.max_model_len, at(scenario.prompt_scale, t))
        out.append(
            Arrival(
                rid=f"r{n}",
                at=t,
                prompt_tokens=prompt,
                output_tokens=output,
                max_tokens=max_tokens,
                temperature=temperature,
                alpha_multiplier=at(scenario.alpha_multiplier, t),
            )
        )
        n += 1
    return tuple(out)


def _replayed(scenario: Scenario, replay: Replay, rng: random.Random) -> tuple[Arrival, ...]:
    """A replay's requests at their recorded times and lengths; each generates exactly its recorded output
    (max_tokens = output, as a load client forces it with ignore_eos), its temperature drawn from the mix."""
    out: list[Arrival] = []
    for n, (t, prompt, output) in enumerate(replay.requests):
        hot = rng.random() < at(scenario.high_temperature_share, t)
        temperature = 1.0 if hot else (0.0 if rng.random() < 0.5 else 0.7)
        out.append(Arrival(f"r{n}", t, prompt, output, output, temperature, at(scenario.alpha_multiplier, t)))
    return tuple(out)


H = 3600.0

_DIURNAL = Scenario(
    "diurnal",
    "S2 past capacity: 70B/4xH100 draft model K=4, load 9.5% -> 133% -> 9.5% of no-SD capacity (1 -> 14 -> 1"
    " QPS) over a compressed 3 h day",
    "llama70b-4xh100",
    "draft_model",
    4,
    3 * H,
    share_of_capacity("llama70b-4xh100", ((0.0, 0.095), (1.5 * H, 1.334), (3 * H, 0.095))),
    ((0.0, 0.2),),
    tpot_slo_ms=45.0,
    ttft_slo_s=3.0,
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "steady-low",
        "S1: 8B/H100 EAGLE-3 K=3, steady at 30% of no-SD capacity (4 QPS of ShareGPT lengths), T in {0, 0.7}",
        "llama8b-h100",
        "eagle3",
        3,
        1 * H,
        share_of_capacity("llama8b-h100", ((0.0, 0.30),)),
        ((0.0, 0.0),),
        tpot_slo_ms=15.0,
        dynamic=False,
    ),
    _DIURNAL,
    replace(
        _DIURNAL,
        name="diurnal-within-capacity",
        description="the diurnal ramp: 70B/4xH100 draft model K=4, load 10% -> 90% -> 10% of no-SD"
        " capacity over a compressed 3 h day",
        qps=share_of_capacity("llama70b-4xh100", ((0.0, 0.10), (1.5 * H, 0.90), (3 * H, 0.10))),
    ),
    Scenario(
        "spike",
        "S3: 8B/H100 EAGLE-3 K=3, 40% of no-SD capacity (5.3 QPS) with a 5x flash crowd (200%) for 10 minutes",
        "llama8b-h100",
        "eagle3",
        3,
        1 * H,
        share_of_capacity("llama8b-h100", ((0.0, 0.40), (1500.0, 0.40), (1501.0, 2.0), (2100.0, 2.0), (2101.0, 0.40))),
        ((0.0, 0.2),),
        tpot_slo_ms=15.0,
    ),
    Scenario(
        "temperature-shift",
        "S4: 70B draft model K=4 at 76% of no-SD capacity (8 QPS); the T=1.0 share rises 10% -> 80% over 30 min,"
        " then falls back",
        "llama70b-4xh100",
        "draft_model",
        4,
        2 * H,
        share_of_capacity("llama70b-4xh100", ((0.0, 0.762),)),
        ((0.0, 0.1), (1200.0, 0.1), (3000.0, 0.8), (5400.0, 0.8), (6000.0, 0.1)),
        tpot_slo_ms=45.0,
        ttft_slo_s=3.0,
    ),
    Scenario(
        "mixed-temperature",
        "S5: 8B EAGLE-3 K=3 at no-SD capacity (13.2 QPS) with a steady mix of T = 0 / 0.7 / 1.0 (40/40/20%)",
        "llama8b-h100",
        "eagle3",
        3,
        1 * H,
        share_of_capacity("llama8b-h100", ((0.0, 1.0),)),
        ((0.0, 0.2),),
        tpot_slo_ms=15.0,
        dynamic=False,
    ),
    Scenario(
        "long-context",
        "S6/S8: 8B EAGLE-3 K=3 at 15% of no-SD capacity at ShareGPT lengths (2 QPS); prompts grow 4x -> 32x"
        " (about 1k -> 8k tokens): KV pressure",
        "llama8b-h100",
        "eagle3",
        3,
        1 * H,
        share_of_capacity("llama8b-h100", ((0.0, 0.15),)),
        ((0.0, 0.2),),
        lengths=LONG_PROMPTS,
        prompt_scale=((0.0, 4.0), (3000.0, 32.0)),
        max_model_len=32768,
        tpot_slo_ms=20.0,
        ttft_slo_s=5.0,
    ),
    Scenario(
        "drafter-degraded",
        "S7: 8B EAGLE-3 K=3 at 60% of no-SD capacity (7.9 QPS); after 20 min an upgrade cuts the drafter's"
        " acceptance to 0.45x",
        "llama8b-h100",
        "eagle3",
        3,
        1.5 * H,
        share_of_capacity("llama8b-h100", ((0.0, 0.60),)),
        ((0.0, 0.2),),
        alpha_multiplier=((0.0, 1.0), (1199.0, 1.0), (1200.0, 0.45)),
        tpot_slo_ms=15.0,
    ),
)


# Scenarios outside the calibrated set-ups' comfort: thin traffic, a GPU class the operator has no profile for, and a CR
# whose target changes. The rates are absolute (they are the point of the scenario), not shares of capacity.
SCENARIOS += (
    Scenario(
        "low-traffic",
        "8B/H100 EAGLE-3 K=3 at 0.1 QPS for 2 h: most 5-minute windows hold too few requests for a latency figure",
        "llama8b-h100",
        "eagle3",
        3,
        2 * H,
        ((0.0, 0.1),),
        ((0.0, 0.2),),
        tpot_slo_ms=15.0,
        dynamic=False,
        absolute_rates=True,
    ),
    Scenario(
        "l4-like",
        "8B EAGLE-3 K=3 at 0.3 QPS for 1 h on an L4-like GPU (24 GiB, 300 GB/s): no calibrated profile; the operator"
        " knows only the GPU label and its own measurements",
        "llama8b-l4-like",
        "eagle3",
        3,
        1 * H,
        ((0.0, 0.3),),
        ((0.0, 0.2),),
        tpot_slo_ms=100.0,
        dynamic=False,
    ),
    Scenario(
        "target-change",
        "the CR ran 8B/H100 without speculation for 30 min at 30% of its capacity (4 QPS); its target becomes"
        " 70B/4xH100 with a draft model K=4 at 30% of that capacity (3.1 QPS) for 1 h: the 8B's records must not"
        " decide for the 70B",
        "llama70b-4xh100",
        "draft_model",
        4,
        1 * H,
        share_of_capacity("llama70b-4xh100", ((0.0, 0.30),)),
        ((0.0, 0.2),),
        tpot_slo_ms=45.0,
        ttft_slo_s=3.0,
        dynamic=False,
        previous=Scenario(
            "target-change-before",
            "8B/H100, declared without speculation, 30% of no-SD capacity",
            "llama8b-h100",
            "eagle3",
            3,
            0.5 * H,
            share_of_capacity("llama8b-h100", ((0.0, 0.30),)),
            ((0.0, 0.2),),
            speculation_enabled=False,
        ),
    ),
)


# A day at full length, and a CR on a vLLM release that can only switch speculation as a whole. Rates are shares of
# capacity, as in the first set.
_DAY: Points = ((0.0, 0.01), (6 * H, 0.01), (9 * H, 0.4), (12 * H, 1.05), (14 * H, 1.05), (17 * H, 0.3),
                 (20 * H, 0.05), (24 * H, 0.01))  # fmt: skip
SCENARIOS += (
    Scenario(
        "diurnal-24h",
        "8B/H100 EAGLE-3 K=3 over 24 h: a night at 1% of no-SD capacity (0.13 QPS) to 06:00, a morning ramp to a"
        " peak of 105% (13.8 QPS) from 12:00 to 14:00, an evening fall to 5% by 20:00 and 1% by 24:00",
        "llama8b-h100",
        "eagle3",
        3,
        24 * H,
        share_of_capacity("llama8b-h100", _DAY),
        ((0.0, 0.2),),
        tpot_slo_ms=15.0,
    ),
    Scenario(
        "onoff-only-version",
        f"8B/H100 EAGLE-3 K=3 on vLLM {ONOFF_ONLY_VERSION}, which has no per-batch-size schedule and refuses"
        " disable_by_batch_size: load 20% -> 100% -> 20% of no-SD capacity over 1.5 h, speculation on or off only",
        "llama8b-h100",
        "eagle3",
        3,
        1.5 * H,
        share_of_capacity("llama8b-h100", ((0.0, 0.20), (0.75 * H, 1.0), (1.5 * H, 0.20))),
        ((0.0, 0.2),),
        tpot_slo_ms=15.0,
        vllm_version=ONOFF_ONLY_VERSION,
    ),
)

# The drafter choice: the CR declares one drafter and lists another in
# spec.speculation.candidates; the operator tries the candidate on one pod (trials need >= 2 replicas: these scenarios
# run at `--replicas 2`) and keeps the faster. The TPOT SLO is an interactive one at which the drafter decides how
# many requests meet it; the load, 20% of one pod's no-speculation capacity per pod, is light enough that the pod
# serving alone while the other restarts (for a trial or a rollout) keeps most of its requests within that SLO.
# The CR declares what such a deployment runs for: spec.autotune.objective Latency, under which a restart is never
# priced as free for the throughput the pods left serving still carry (schedule.restart_at_load).
_DRAFT_CHOICE = Scenario(
    "draft-choice",
    "70B/4xH100 at 20% of no-SD capacity per pod (2.1 QPS), chat traffic, TPOT SLO 12 ms: n-gram K=4 declared, the"
    " 1B draft model listed as a candidate; the operator must try it on one pod and keep it",
    "llama70b-4xh100",
    "ngram",
    4,
    3 * H,
    share_of_capacity("llama70b-4xh100", ((0.0, 0.2),)),
    ((0.0, 0.2),),
    tpot_slo_ms=12.0,
    ttft_slo_s=3.0,
    dynamic=False,
    candidates=("draft_model",),
    objective=AutotuneObjective.LATENCY,
    # a trial on the 70B: the trial pod's 300 s restart, a 5-minute analysis once extended, then the other pod's
    # rollout: about 30 minutes of the scenario
    shortest_s=2400.0,
)

SCENARIOS += (
    _DRAFT_CHOICE,
    replace(
        _DRAFT_CHOICE,
        name="draft-choice-already-best",
        description="as draft-choice, but the 1B draft model K=4 is declared and the 8B draft model listed as a"
        " candidate: its trial must lose and nothing change",
        method="draft_model",
        candidates=("draft_model_8b",),
    ),
)


def scenario_named(name: str, choices: Sequence[Scenario] = SCENARIOS) -> Scenario:
    for s in choices:
        if s.name == name:
            return s
    raise ValueError(f"unknown scenario {name!r}; known: {', '.join(s.name for s in choices)}")


def poisson_rate_check(items: Sequence[Arrival], duration_s: float) -> float:
    """Mean arrival rate of a list (tests compare it to the scenario's λ)."""
    return len(items) / duration_s if duration_s > 0 else math.nan

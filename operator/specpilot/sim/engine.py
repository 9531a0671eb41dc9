"""One vLLM V1 replica as a stepped model: scheduler, step time, speculation, KV cache, metrics (pure).

Per step (docs/design/simulator.md): running requests first (decodes take 1 + K budget tokens and
reserve K + 1 KV slots; unfinished prefills take a chunk), then FCFS admissions while `max_num_seqs`, the token
budget and the KV cache allow; KV exhausted -> the most recently admitted request is preempted (recompute) and
re-queued at the front. K comes from the speculative config: a fixed K, vLLM >= 0.24's per-batch-size table looked
up by the number of scheduled requests, or V0's `disable_by_batch_size` (running >= threshold -> K = 0 for the
step; honoured only before 0.10, as in vLLM). Step time (cost model): staircase over captured CUDA-graph sizes,
the eager cliff beyond the capture limit, the drafter term of the method, and the tax of a configured drafter in
steps at K = 0 (+2% always; one drafter forward under a dynamic table, vLLM #53420).

The engine never reads a clock: `step()` returns how long the step took and advances `now`; the benchmark runs it
on a virtual clock, the server sleeps for real. Randomness is per request (seeded from the engine seed and the
request id), so two engines given the same requests see the same lengths and acceptance luck.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

from specpilot.sim import acceptance as acc
from specpilot.sim.metrics import FINISHED_REASONS, MetricsState, families
from specpilot.sim.presets import DrafterKind, DrafterPreset, Preset, capture_sizes
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import DYNAMIC_SPECULATION, V0_ENGINE_REMOVED, VllmVersion

Schedule = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class SpecConfig:
    """What `--speculative-config` (or the legacy flags) configured."""

    method: str
    num_speculative_tokens: int
    schedule: Schedule | None = None  # num_speculative_tokens_per_batch_size
    disable_by_batch_size: int | None = None
    model: str | None = None

    def k_for(self, version: VllmVersion, scheduled: int, running: int) -> int:
        """K of one step, as this vLLM version computes it."""
        if self.schedule and version >= DYNAMIC_SPECULATION:
            k = self.schedule[0][2]
            for lo, _hi, range_k in self.schedule:
                if scheduled >= lo:  # gaps and the tail inherit the previous K (vllm/v1/spec_decode/dynamic/utils.py)
                    k = range_k
            return min(k, self.num_speculative_tokens)
        if (
            self.disable_by_batch_size is not None
            and version < V0_ENGINE_REMOVED
            and running >= self.disable_by_batch_size
        ):
            return 0
        return self.num_speculative_tokens

    @property
    def dynamic(self) -> bool:
        return bool(self.schedule)


@dataclass(frozen=True)
class EngineConfig:
    preset: Preset
    version: VllmVersion
    model_name: str
    max_num_seqs: int
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    speculation: SpecConfig | None = None
    gpu_memory_utilization: float = 0.92
    block_size: int = 16

    @property
    def drafter(self) -> DrafterPreset | None:
        return None if self.speculation is None else self.preset.drafter(self.speculation.method)

    @property
    def kv_blocks(self) -> int:
        """KV blocks: the preset's capacity scaled by memory utilization, shared with a draft model's own cache."""
        drafter = self.drafter
        share = 1 + (drafter.kv_factor if drafter is not None else 0.0)
        tokens = self.preset.kv_capacity_tokens * self.gpu_memory_utilization / 0.92 / share
        return max(1, int(tokens // self.block_size))

    @property
    def capture_max(self) -> int:
        """max_cudagraph_capture_size = min(max_num_seqs·(1 + K)·2, platform limit, max_num_batched_tokens)."""
        k = self.speculation.num_speculative_tokens if self.speculation else 0
        return min(self.max_num_seqs * (1 + k) * 2, self.preset.capture_limit, self.max_num_batched_tokens)


@dataclass(eq=False)
class SimRequest:
    """One request: what the client asked for, and its progress through the engine."""

    rid: str
    arrival: float
    prompt_tokens: int
    max_tokens: int
    output_tokens: int | None = None  # where the model would stop on its own; None: runs to max_tokens
    temperature: float = 0.0
    alpha_multiplier: float = 1.0
    klass: str = ""
    # progress
    prefill_goal: int = 0
    prefilled: int = 0
    generated: int = 0
    blocks: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    preemptions: int = 0
    steps: int = 0
    rng: random.Random = field(default_factory=random.Random, repr=False)
    accept_state: acc.RequestAcceptance | None = None

    target_len: int = 0  # set at submit: where generation ends

    @property
    def target(self) -> int:
        return self.max_tokens if self.output_tokens is None else max(1, min(self.output_tokens, self.max_tokens))

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def tpot(self) -> float | None:
        """Per-request decode time / (generated - 1), as vLLM's request_time_per_output_token."""
        if self.generated < 2 or self.first_token_at is None or self.last_token_at is None:
            return None
        return (self.last_token_at - self.first_token_at) / (self.generated - 1)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.arrival


@dataclass(frozen=True)
class StepReport:
    start: float
    duration: float
    scheduled: int
    decodes: int
    k: int
    tokens: int  # verified + prefill tokens of the step
    emitted: tuple[tuple[SimRequest, int], ...]
    finished: tuple[SimRequest, ...]
    preempted: int


@dataclass(slots=True)
class _StepPlan:
    """What one step schedules: decodes with their proposal, prefill chunks, and the work they add up to."""

    budget: int  # batched tokens still free
    decodes: list[tuple[SimRequest, int]]
    prefills: list[tuple[SimRequest, int]]
    tokens: int
    kv_read: int
    k_used: int  # the longest proposal scheduled
    preempted: int


class Engine:
    """The stepped replica. `submit` requests, call `step` while `has_work`; `metrics` is what /metrics shows."""

    def __init__(self, config: EngineConfig, *, seed: int = 0, now: float = 0.0) -> None:
        self.config = config
        self.seed = seed
        self.now = now
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.total_blocks = config.kv_blocks
        self.used_blocks = 0
        self.names = metric_names_for(config.version)
        self.metrics = MetricsState(
            families(config.version, speculation=config.speculation is not None, max_model_len=config.max_model_len),
            created=now,
        )
        self._sizes = capture_sizes(config.capture_max)
        self.peak_running = 0  # the largest batch seen (a K-per-batch table differs from a fixed K only beyond it)
        self._init_series()

    # ------------------------------------------------------------------------------------------ set-up

    def _init_series(self) -> None:
        m = self.metrics
        for reason in FINISHED_REASONS:
            m.inc(self.names.request_success.removesuffix("_total"), 0.0, (reason,))
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            m.inc("vllm:prompt_tokens_by_source", 0.0, (source,))
        for source in ("device", "host", "p2p", "disk", "external_unspecified"):
            m.inc("vllm:prompt_tokens_cached_by_source", 0.0, (source,))
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            m.inc("vllm:admission_rejections", 0.0, (reason,))
        for name in (
            "vllm:estimated_flops_per_gpu",
            "vllm:estimated_read_bytes_per_gpu",
            "vllm:estimated_write_bytes_per_gpu",
            "vllm:prefix_cache_queries",
            "vllm:prefix_cache_hits",
            "vllm:external_prefix_cache_queries",
            "vllm:external_prefix_cache_hits",
            "vllm:mm_cache_queries",
            "vllm:mm_cache_hits",
            self.names.preemptions.removesuffix("_total"),
            "vllm:prompt_tokens",
            "vllm:prompt_tokens_cached",
            self.names.generation_tokens.removesuffix("_total"),
        ):
            m.inc(name, 0.0)
        spec = self.config.speculation
        if spec is not None:
            for name in (
                "vllm:spec_decode_num_drafts",
                "vllm:spec_decode_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens",
            ):
                m.inc(name, 0.0)
            for pos in range(spec.num_speculative_tokens):  # vLLM pre-creates every position
                m.inc("vllm:spec_decode_num_accepted_tokens_per_pos", 0.0, (str(pos),))
        m.set("vllm:engine_sleep_state", 1.0, ("awake",))
        m.set("vllm:engine_sleep_state", 0.0, ("weights_offloaded",))
        m.set("vllm:engine_sleep_state", 0.0, ("discard_all",))
        self._gauges()

    def cache_config_labels(self) -> dict[str, str]:
        """Values of vllm:cache_config_info's labels for this configuration."""
        c = self.config
        tokens = self.total_blocks * c.block_size
        values = {
            "_block_size_resolved": "True",
            "block_size": str(c.block_size),
            "cache_dtype": "auto",
            "effective_attention_block_size": str(c.block_size),
            "enable_prefix_caching": "True",
            "gpu_memory_utilization": str(c.gpu_memory_utilization),
            "kv_cache_max_concurrency": f"{tokens / c.max_model_len:.1f}",
            "kv_cache_size_tokens": str(tokens),
            "num_gpu_blocks": str(self.total_blocks),
            "kv_offloading_backend": "native",
            "mamba_cache_dtype": "auto",
            "mamba_cache_mode": "none",
            "mamba_ssm_cache_dtype": "float32",
            "prefix_cache_retention_interval": "0",
            "prefix_caching_hash_algo": "sha256",
            "replayssm_buffer_len": "16",
            "kv_cache_dtype_skip_layers": "[]",
        }
        return values

    # ------------------------------------------------------------------------------------------ requests

    def submit(self, request: SimRequest) -> None:
        """Queue a request (its arrival is its own; the engine serves it from the next step on)."""
        request.rng = random.Random(f"{self.seed}:{request.rid}")
        request.prefill_goal = request.prompt_tokens
        request.target_len = request.target
        drafter = self.config.drafter
        if drafter is not None:
            request.accept_state = acc.start(drafter, request.temperature, request.alpha_multiplier, request.rng)
        self.waiting.append(request)
        self.metrics.set(self.names.waiting_requests, float(len(self.waiting)))

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def abort_all(self) -> list[SimRequest]:
        """Everything in flight ends with finished_reason "abort" (a restart or shutdown)."""
        aborted = [*self.running, *self.waiting]
        for r in aborted:
            r.finished_at = self.now
            r.finish_reason = "abort"
            self.metrics.inc(self.names.request_success.removesuffix("_total"), 1.0, ("abort",))
        self.running.clear()
        self.waiting.clear()
        self.used_blocks = 0
        self._gauges()
        return aborted

    def abort(self, rid: str) -> SimRequest | None:
        """The client of `rid` went away: vLLM's API server aborts a request whose connection closed.

        The request leaves the queue or the batch and frees its KV blocks at once. vLLM (0.32's output processor and
        scheduler.finish_requests) records no finished-request statistics for it: no request_success, no latency
        histogram. None when the request is unknown or already finished.
        """
        found = next((r for r in (*self.running, *self.waiting) if r.rid == rid), None)
        if found is None:
            return None
        if found in self.running:
            self.running.remove(found)
        else:
            self.waiting.remove(found)
        self._client_gone(found)
        self._gauges()
        return found

    def abandon_waiting(self, arrived_before: float) -> list[SimRequest]:
        """Requests still queued without a first token whose clients gave up (they arrived before `arrived_before`).

        A client or gateway that times out closes the connection and vLLM aborts the request, as `abort` does, so a
        queue past capacity holds at most one timeout of arrivals instead of growing without bound.
        """
        gone: list[SimRequest] = []
        kept: list[SimRequest] = []
        while self.waiting:  # preempted requests (first token sent) sit in front, then arrivals in order
            r = self.waiting[0]
            if r.first_token_at is None and r.arrival >= arrived_before:
                break
            self.waiting.popleft()
            (kept if r.first_token_at is not None else gone).append(r)
        self.waiting.extendleft(reversed(kept))
        for r in gone:
            self._client_gone(r)
        if gone:
            self._gauges()
        return gone

    def _client_gone(self, r: SimRequest) -> None:
        """A request already taken out of the batch or the queue ends as aborted; its KV blocks are free again."""
        self._free(r)
        r.finished_at = self.now
        r.finish_reason = "abort"

    # ------------------------------------------------------------------------------------------ cost model

    def stair(self, tokens: int) -> int:
        """The captured graph size a step of `tokens` runs at (itself beyond the capture limit)."""
        if tokens > self.config.capture_max or not self._sizes:
            return tokens
        lo, hi = 0, len(self._sizes) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._sizes[mid] >= tokens:
                hi = mid
            else:
                lo = mid + 1
        return self._sizes[lo]

    def step_ms(self, tokens: int, kv_read: int, decodes: int, k: int, requests: int | None = None) -> float:
        """Step time: staircase verify + cliff + drafter + scheduler, with the configured-drafter tax.

        `requests` is how many requests the step schedules (decodes and prefill chunks; `decodes` when omitted).
        """
        preset = self.config.preset
        verify = preset.verify_ms(self.stair(max(tokens, 1)), kv_read)
        if tokens > self.config.capture_max:
            verify += preset.eager_penalty_ms
        scheduled = decodes if requests is None else requests
        total = verify + preset.sched_ms + preset.sched_ms_per_request * scheduled
        spec = self.config.speculation
        drafter = self.config.drafter
        if spec is None or drafter is None:
            return total
        if k > 0:
            total += draft_ms(preset, drafter, k, decodes, kv_read, verify)
        elif spec.dynamic and decodes > 0 and drafter.kind is not DrafterKind.LOOKUP:
            total += draft_ms(preset, drafter, 1, decodes, kv_read, verify)  # K = 0 still runs one drafter forward
        return total * (1 + preset.spec_fixed_fraction)

    # ------------------------------------------------------------------------------------------ one step

    def _blocks(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    def _grow(self, r: SimRequest, tokens: int) -> bool:
        need = (
            self._blocks(r.prefilled + tokens) - r.blocks
            if r.prefilled < r.prefill_goal
            else (self._blocks(r.context + tokens) - r.blocks)
        )
        if need <= 0:
            return True
        if self.used_blocks + need > self.total_blocks:
            return False
        r.blocks += need
        self.used_blocks += need
        return True

    def _free(self, r: SimRequest) -> None:
        self.used_blocks -= r.blocks
        r.blocks = 0

    def _preempt(self, r: SimRequest) -> None:
        self.running.remove(r)
        self._free(r)
        r.preemptions += 1
        r.prefilled = 0
        r.prefill_goal = r.context  # recompute prompt + generated tokens
        self.waiting.appendleft(r)
        self.metrics.inc(self.names.preemptions.removesuffix("_total"))

    def step(self) -> StepReport:
        """Schedule, run and account one engine step; `now` advances by its duration."""
        c = self.config
        spec = c.speculation
        start = self.now
        batch = len(self.running)
        if batch > self.peak_running:
            self.peak_running = batch
        k_step = spec.k_for(c.version, batch, batch) if spec else 0
        plan = self._schedule_running(k_step)
        self._admit(plan, start)
        if len(self.running) > self.peak_running:
            self.peak_running = len(self.running)
        decodes = plan.decodes
        scheduled = len(decodes) + len(plan.prefills)
        if scheduled == 0:
            self._gauges()
            return StepReport(start, 0.0, 0, 0, k_step, 0, (), (), plan.preempted)
        dt = self.step_ms(plan.tokens, plan.kv_read, len(decodes), plan.k_used, scheduled) / 1000.0
        end = start + dt
        self.now = end
        emitted: list[tuple[SimRequest, int]] = []
        done: list[SimRequest] = []  # reached their target this step, in emission order
        emitted_total = self._emit_decodes(decodes, self._accept_drafts(decodes), end, emitted, done)
        prefill_tokens, first_tokens = self._complete_prefills(plan.prefills, end, emitted, done)
        emitted_total += first_tokens
        self.metrics.observe("vllm:iteration_tokens_total", float(prefill_tokens + emitted_total))
        finished: list[SimRequest] = []
        for r in done:
            if r.finished_at is None:
                self._finish(r, end)
                finished.append(r)
        self._gauges()
        emitted_steps, finished_steps = tuple(emitted), tuple(finished)
        return StepReport(
            start, dt, scheduled, len(decodes), plan.k_used, plan.tokens, emitted_steps, finished_steps, plan.preempted
        )

    def _schedule_running(self, k_step: int) -> _StepPlan:
        """Phase 1: running requests, oldest first, within the token budget; preempt the newest when KV is full.

        A decode takes 1 + its proposal in budget tokens (the proposal drops to 0 when that does not fit) and
        reserves the KV slots of every proposed token; an unfinished prefill takes the next chunk. A request that
        has to preempt itself to grow ends the phase.
        """
        c = self.config
        drafter = c.drafter
        budget = c.max_num_batched_tokens
        decodes: list[tuple[SimRequest, int]] = []
        prefills: list[tuple[SimRequest, int]] = []
        preempted = 0
        bursty = drafter is not None and drafter.kind is DrafterKind.LOOKUP
        block = c.block_size
        tokens = kv_read = k_used = 0
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            if r.prefilled >= r.prefill_goal:  # decode: the common case, kept lean
                proposal = k_step
                if bursty and k_step:
                    proposal = acc.propose(drafter, r.accept_state, k_step, r.rng)  # type: ignore[arg-type]
                chunk = 1 + proposal
                if chunk > budget:
                    proposal, chunk = 0, 1
                context = r.prompt_tokens + r.generated
                need = -(-(context + chunk) // block) - r.blocks
                if need <= 0 or self.used_blocks + need <= self.total_blocks:
                    if need > 0:
                        r.blocks += need
                        self.used_blocks += need
                    budget -= chunk
                    tokens += chunk
                    kv_read += context
                    if proposal > k_used:
                        k_used = proposal
                    decodes.append((r, proposal))
                    i += 1
                    continue
                chunk_is = chunk
            else:
                proposal = 0
                chunk_is = min(r.prefill_goal - r.prefilled, budget)
            chunk = chunk_is
            evicted_self = False
            while not self._grow(r, chunk):
                victim = self.running[-1]
                self._preempt(victim)
                preempted += 1
                if victim is r:
                    evicted_self = True
                    break
            if evicted_self:
                break
            budget -= chunk
            tokens += chunk
            if r.prefilled < r.prefill_goal:
                kv_read += r.prefilled + chunk
                prefills.append((r, chunk))
            else:
                kv_read += r.context
                k_used = max(k_used, proposal)
                decodes.append((r, proposal))
            i += 1
        return _StepPlan(budget, decodes, prefills, tokens, kv_read, k_used, preempted)

    def _admit(self, plan: _StepPlan, start: float) -> None:
        """Phase 2: admissions, FCFS, while budget, max_num_seqs and KV allow; none in a step that preempted."""
        c = self.config
        while self.waiting and not plan.preempted and plan.budget > 0 and len(self.running) < c.max_num_seqs:
            r = self.waiting[0]
            chunk = min(r.prefill_goal - r.prefilled, plan.budget)
            if not self._grow(r, chunk):
                break
            self.waiting.popleft()
            if r.scheduled_at is None:
                r.scheduled_at = start
                self.metrics.inc("vllm:prefix_cache_queries", float(r.prompt_tokens))
            self.running.append(r)
            plan.prefills.append((r, chunk))
            plan.budget -= chunk
            plan.tokens += chunk
            plan.kv_read += r.prefilled + chunk

    def _accept_drafts(self, decodes: list[tuple[SimRequest, int]]) -> list[int]:
        """Phase 3a: verify each decode's proposal; the tokens each decode yields (accepted + 1, or 1 without one).

        Counts drafts, draft tokens and accepted tokens (in total and per position) in the spec-decode counters.
        """
        drafter = self.config.drafter
        spec = self.config.speculation
        drafts = draft_tokens = accepted_total = 0
        k_max = spec.num_speculative_tokens if spec else 0
        accepted_hist = [0] * (k_max + 1)  # decodes by accepted length; per-position counts are its tail sums
        positional = drafter is not None and drafter.kind is not DrafterKind.LOOKUP
        rho = drafter.rho if drafter is not None else 1.0
        yields: list[int] = []
        for r, proposal in decodes:
            if proposal <= 0:
                yields.append(1)
                continue
            accepted = 0
            if positional:  # acceptance.accept, inlined: the hot loop of every benchmark
                a = r.accept_state.alpha  # type: ignore[union-attr]
                u = r.rng.random()
                survival = 1.0
                for _ in range(proposal):
                    survival *= a
                    if survival <= u:
                        break
                    accepted += 1
                    a *= rho
            else:
                accepted = acc.accept(drafter, r.accept_state, proposal, r.rng)  # type: ignore[arg-type]
            drafts += 1
            draft_tokens += proposal
            accepted_total += accepted
            accepted_hist[accepted] += 1
            yields.append(accepted + 1)
        if drafts:
            m = self.metrics
            m.inc("vllm:spec_decode_num_drafts", float(drafts))
            m.inc("vllm:spec_decode_num_draft_tokens", float(draft_tokens))
            m.inc("vllm:spec_decode_num_accepted_tokens", float(accepted_total))
            tail = 0
            per_pos = [0] * k_max
            for pos in range(k_max - 1, -1, -1):
                tail += accepted_hist[pos + 1]
                per_pos[pos] = tail
            for pos, count in enumerate(per_pos):
                if count:
                    m.inc("vllm:spec_decode_num_accepted_tokens_per_pos", float(count), (str(pos),))
        return yields

    def _emit_decodes(
        self,
        decodes: list[tuple[SimRequest, int]],
        yields: list[int],
        end: float,
        emitted: list[tuple[SimRequest, int]],
        done: list[SimRequest],
    ) -> int:
        """Phase 3b: emit each decode's tokens (up to its target), observe inter-token gaps, release rejected slots.

        Appends to `emitted` and `done` in decode order; returns the tokens emitted.
        """
        m = self.metrics
        itl = m.histograms.get(self.names.inter_token_latency)
        block = self.config.block_size
        itl_counts = itl.counts if itl is not None else None
        itl_bounds = itl.bounds if itl is not None else ()
        itl_sum, itl_n = 0.0, 0
        last_seen: float | None = None  # requests decoded in the previous step share one gap: one bisect for all
        bucket = 0
        emitted_total = 0
        emit = emitted.append
        for (r, _), n in zip(decodes, yields, strict=True):
            generated = r.generated
            target_len = r.target_len
            if n > target_len - generated:
                n = target_len - generated
            last = r.last_token_at
            if itl_counts is not None and last is not None:
                gap = end - last
                if last != last_seen:
                    last_seen = last
                    bucket = bisect_left(itl_bounds, gap)
                itl_counts[bucket] += 1
                itl_sum += gap
                itl_n += 1
            generated += n
            r.generated = generated
            r.last_token_at = end
            emit((r, n))
            emitted_total += n
            keep = -(-(r.prompt_tokens + generated) // block)
            if keep < r.blocks:  # release the slots of rejected drafts
                self.used_blocks -= r.blocks - keep
                r.blocks = keep
            if generated >= target_len:
                done.append(r)
        if itl is not None:
            itl.total += itl_sum
            itl.count += itl_n
        if emitted_total:
            m.inc(self.names.generation_tokens.removesuffix("_total"), float(emitted_total))
        return emitted_total

    def _complete_prefills(
        self,
        prefills: list[tuple[SimRequest, int]],
        end: float,
        emitted: list[tuple[SimRequest, int]],
        done: list[SimRequest],
    ) -> tuple[int, int]:
        """Phase 4: advance each prefill by its chunk; a completed prefill emits a token.

        That is the request's first token, or after a preemption (recompute) its next one. Returns the prefill tokens
        and the tokens emitted.
        """
        m = self.metrics
        gen_name = self.names.generation_tokens.removesuffix("_total")
        prefill_tokens = first_tokens = 0
        for r, chunk in prefills:
            r.prefilled += chunk
            prefill_tokens += chunk
            if r.prefilled >= r.prefill_goal:
                if r.first_token_at is None:
                    r.first_token_at = end
                    m.observe(self.names.time_to_first_token, end - r.arrival)
                    m.inc("vllm:prompt_tokens", float(r.prompt_tokens))
                    m.inc("vllm:prompt_tokens_by_source", float(r.prompt_tokens), ("local_compute",))
                else:
                    m.observe(self.names.inter_token_latency, end - (r.last_token_at or end))
                r.generated += 1
                r.last_token_at = end
                emitted.append((r, 1))
                first_tokens += 1
                m.inc(gen_name, 1.0)
                if r.generated >= r.target_len:
                    done.append(r)
        return prefill_tokens, first_tokens

    def _finish(self, r: SimRequest, end: float) -> None:
        self.running.remove(r)
        self._free(r)
        r.finished_at = end
        r.finish_reason = "length" if r.generated >= r.max_tokens else "stop"
        m = self.metrics
        names = self.names
        m.inc(names.request_success.removesuffix("_total"), 1.0, (r.finish_reason,))
        scheduled = r.scheduled_at if r.scheduled_at is not None else r.arrival
        first = r.first_token_at if r.first_token_at is not None else end
        m.observe(names.e2e_latency, end - r.arrival)
        m.observe("vllm:request_queue_time_seconds", scheduled - r.arrival)
        m.observe("vllm:request_inference_time_seconds", end - scheduled)
        m.observe("vllm:request_prefill_time_seconds", first - scheduled)
        m.observe("vllm:request_decode_time_seconds", end - first)
        tpot = r.tpot
        if tpot is not None and names.per_token_latency is not None:
            m.observe(names.per_token_latency, tpot)
        m.observe("vllm:request_prompt_tokens", float(r.prompt_tokens))
        m.observe("vllm:request_generation_tokens", float(r.generated))
        m.observe("vllm:request_max_num_generation_tokens", float(r.max_tokens))
        m.observe("vllm:request_params_max_tokens", float(r.max_tokens))
        m.observe("vllm:request_params_n", 1.0)
        m.observe("vllm:request_num_preemptions", float(r.preemptions))
        m.observe("vllm:request_prefill_kv_computed_tokens", float(r.prompt_tokens))

    def _gauges(self) -> None:
        m = self.metrics
        m.set(self.names.running_requests, float(len(self.running)))
        m.set(self.names.waiting_requests, float(len(self.waiting)))
        m.set("vllm:num_requests_waiting_by_reason", float(len(self.waiting)), ("capacity",))
        m.set("vllm:num_requests_waiting_by_reason", 0.0, ("deferred",))
        m.set(self.names.kv_cache_usage, self.used_blocks / self.total_blocks if self.total_blocks else 0.0)

    def advance_idle(self, until: float) -> None:
        """Nothing to run: the clock jumps (the virtual-clock runner calls this between arrivals)."""
        if until > self.now:
            self.now = until


def draft_ms(preset: Preset, drafter: DrafterPreset, k: int, decodes: int, kv_read: int, verify_ms: float) -> float:
    """T_draft (docs/design/cost-model.md) for one step proposing up to k tokens for `decodes` requests."""
    if drafter.kind is DrafterKind.AUTOREGRESSIVE:
        return k * (drafter.draft_ms + drafter.draft_ms_per_request * decodes) + drafter.draft_kv_ns * 1e-6 * kv_read
    if drafter.kind is DrafterKind.DRAFT_MODEL:
        return k * drafter.cost_ratio * preset.verify_ms(max(decodes, 1), kv_read)
    return drafter.lookup_fraction * verify_ms

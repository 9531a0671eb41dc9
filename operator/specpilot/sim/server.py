"""`specpilot simulate ... serve MODEL [vLLM flags]`: the engine model behind vLLM's HTTP API (imperative shell).

Serves /health, /v1/models, /v1/completions, /v1/chat/completions (streaming as server-sent events, like vLLM's
OpenAI server) and /metrics; a client that disconnects has its request aborted, as vLLM does. One asyncio task runs
engine steps and sleeps each step's simulated duration divided by `time_scale`; requests wait on per-request queues
for their tokens. /health answers 503 until the simulated start-up (model load + graph capture) has passed. Listens
where --host/--port say (the pod runner passes 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from specpilot.sim.args import ServeArgs
from specpilot.sim.engine import Engine, EngineConfig, SimRequest
from specpilot.sim.exposition import make_registry
from specpilot.sim.presets import Preset
from specpilot.vllm.versions import VllmVersion

WORD = "tok"


@dataclass
class _Waiter:
    queue: asyncio.Queue[int] = field(default_factory=asyncio.Queue)


class SimServer:
    def __init__(
        self,
        serve: ServeArgs,
        *,
        preset: Preset,
        version: VllmVersion,
        seed: int,
        time_scale: float,
        startup_s: float,
    ) -> None:
        self.serve = serve
        config = EngineConfig(
            preset=preset,
            version=version,
            model_name=serve.served_model_name,
            max_num_seqs=serve.max_num_seqs or preset.default_max_num_seqs,
            max_num_batched_tokens=serve.max_num_batched_tokens,
            max_model_len=serve.max_model_len,
            speculation=serve.speculation,
            gpu_memory_utilization=serve.gpu_memory_utilization,
        )
        self.engine = Engine(config, seed=seed)
        self.engine.metrics.created = time.time()
        self.time_scale = time_scale
        self.ready_at = time.monotonic() + startup_s
        self.started = time.monotonic()
        self.waiters: dict[str, _Waiter] = {}
        self.wake = asyncio.Event()
        self.registry = make_registry(lambda: self.engine)
        self.counter = 0

    def virtual_now(self) -> float:
        return (time.monotonic() - self.started) * self.time_scale

    async def run_engine(self) -> None:
        engine = self.engine
        while True:
            if not engine.has_work():
                self.wake.clear()
                await self.wake.wait()
                engine.advance_idle(self.virtual_now())
                continue
            report = engine.step()
            if report.duration > 0:
                await asyncio.sleep(report.duration / self.time_scale)
            for request, n in report.emitted:
                waiter = self.waiters.get(request.rid)
                if waiter is not None:
                    waiter.queue.put_nowait(n)
            for request in report.finished:
                waiter = self.waiters.get(request.rid)
                if waiter is not None:
                    waiter.queue.put_nowait(-1)
            if report.duration == 0:
                await asyncio.sleep(0.001)

    # ------------------------------------------------------------------------------------------ handlers

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200 if time.monotonic() >= self.ready_at else 503)

    async def models(self, _: web.Request) -> web.Response:
        created = int(time.time())
        card = {
            "id": self.serve.served_model_name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": self.serve.model,
            "parent": None,
            "max_model_len": self.serve.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _error(self, status: int, message: str, kind: str, param: str | None = None) -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": kind, "param": param, "code": status}}, status=status
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        if time.monotonic() < self.ready_at:
            return self._error(503, "the engine is starting", "ServiceUnavailableError")
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._error(400, "request body is not JSON", "BadRequestError")
        if not isinstance(body, dict):
            return self._error(400, "request body must be a JSON object", "BadRequestError")
        model = body.get("model")
        if model not in (self.serve.served_model_name, None):
            return self._error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        prompt_tokens = _prompt_tokens(body, chat=chat)
        if prompt_tokens is None:
            return self._error(400, "messages (chat) or prompt (completions) is required", "BadRequestError")
        max_tokens = (
            body.get("max_completion_tokens")
            or body.get("max_tokens")
            or (self.serve.max_model_len - prompt_tokens if chat else 16)
        )
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return self._error(400, f"max_tokens must be a positive integer, got {max_tokens!r}", "BadRequestError")
        if prompt_tokens + max_tokens > self.serve.max_model_len:
            return self._error(
                400,
                f"This model's maximum context length is {self.serve.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                "completion).",
                "BadRequestError",
            )
        temperature = body.get("temperature", 1.0)
        temperature = float(temperature) if isinstance(temperature, int | float) else 1.0
        self.counter += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        sim_request = SimRequest(rid, self.virtual_now(), prompt_tokens, max_tokens, temperature=temperature)
        waiter = _Waiter()
        self.waiters[rid] = waiter
        self.engine.advance_idle(self.virtual_now())
        self.engine.submit(sim_request)
        self.wake.set()
        try:
            if body.get("stream"):
                try:
                    usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage")
                    return await self._stream(request, rid, chat, waiter, sim_request, usage=bool(usage))
                except ConnectionResetError:  # the client hung up between two chunks; `finally` aborts
                    return web.Response(status=499)
            generated = 0
            while (n := await waiter.queue.get()) >= 0:
                generated += n
            return web.json_response(self._full(rid, chat, sim_request, generated))
        finally:
            self.waiters.pop(rid, None)
            if sim_request.finished_at is None:  # the client hung up (cancelled handler or a failed write)
                self.engine.abort(rid)

    def _full(self, rid: str, chat: bool, req: SimRequest, generated: int) -> dict[str, Any]:
        text = " ".join([WORD] * generated)
        reason = req.finish_reason or "length"
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            if chat
            else {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        )
        return {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.serve.served_model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": req.prompt_tokens,
                "completion_tokens": generated,
                "total_tokens": req.prompt_tokens + generated,
            },
        }

    async def _stream(
        self, request: web.Request, rid: str, chat: bool, waiter: _Waiter, req: SimRequest, *, usage: bool = False
    ) -> web.StreamResponse:
        """Server-sent events as vLLM's OpenAI server sends them; with stream_options.include_usage, a last chunk
        without choices carries the usage."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"
        first = True
        while (n := await waiter.queue.get()) >= 0:
            text = " ".join([WORD] * n) + " "
            if chat:
                delta: dict[str, Any] = {"content": text}
                if first:
                    delta["role"] = "assistant"
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
            first = False
            chunk = {"id": rid, "object": kind, "created": created, "model": self.serve.served_model_name,
                     "choices": [choice]}  # fmt: skip
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        final_choice: dict[str, Any] = (
            {"index": 0, "delta": {}, "finish_reason": req.finish_reason or "length"}
            if chat
            else {"index": 0, "text": "", "logprobs": None, "finish_reason": req.finish_reason or "length"}
        )
        final = {"id": rid, "object": kind, "created": created, "model": self.serve.served_model_name,
                 "choices": [final_choice]}  # fmt: skip
        await response.write(f"data: {json.dumps(final)}\n\n".encode())
        if usage:
            counted = {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.generated,
                       "total_tokens": req.prompt_tokens + req.generated}  # fmt: skip
            last = {"id": rid, "object": kind, "created": created, "model": self.serve.served_model_name,
                    "choices": [], "usage": counted}  # fmt: skip
            await response.write(f"data: {json.dumps(last)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app


def _prompt_tokens(body: dict[str, Any], *, chat: bool) -> int | None:
    """Token count of the prompt, approximated as one token per 4 characters (at least 1)."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        text = "".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        return max(1, len(text) // 4) + 4 * len(messages)  # chat template overhead
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) for t in prompt):
            return len(prompt)
        prompt = " ".join(str(p) for p in prompt)
    if not isinstance(prompt, str):
        return None
    return max(1, len(prompt) // 4)


async def _serve(server: SimServer) -> None:
    # handler_cancellation: a client that hangs up cancels its handler, so the request is aborted like vLLM's
    # with_cancellation does, instead of holding a batch slot and KV until it would have finished.
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, server.serve.host, server.serve.port)
    await site.start()
    print(
        f"specpilot simulator: {server.engine.config.preset.name}, vLLM {server.engine.config.version}, "
        f"serving {server.serve.served_model_name} on http://{server.serve.host}:{server.serve.port} "
        f"(speculation: {server.serve.speculation or 'off'}; time scale {server.time_scale:g})",
        file=sys.stderr,
        flush=True,
    )
    if server.serve.ignored:
        print(f"specpilot simulator: flags without effect here: {' '.join(server.serve.ignored)}", file=sys.stderr)
    try:
        await server.run_engine()
    finally:
        await runner.cleanup()


def run(
    serve: ServeArgs, *, preset: Preset, version: VllmVersion, seed: int, time_scale: float, startup_s: float
) -> None:
    async def main() -> None:
        server = SimServer(serve, preset=preset, version=version, seed=seed, time_scale=time_scale, startup_s=startup_s)
        await _serve(server)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())

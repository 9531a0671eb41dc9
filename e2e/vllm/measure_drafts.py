"""Measure the greedy acceptance of each graded draft with a real vLLM CPU server (one server at a time).

``python -m e2e.vllm.measure_drafts [-n 12] [--max-tokens 48] [-k 3] [NAME ...]`` starts ``vllm serve`` of the tiny
target with ``--speculative-config {"method": "draft_model", "model": <draft>, "num_speculative_tokens": K}`` for each
draft (default: every graded draft of make_models.GRADED_DRAFT_NOISE), sends ``n`` greedy completions (e2e.vllm.load,
2 in flight) and prints one JSON line per draft: accepted / draft tokens from the server's /metrics counter deltas.
The figures in NOTES.md come from this command.
"""

from __future__ import annotations

import argparse
import json
import time

from e2e.vllm.load import run_load
from e2e.vllm.make_models import GRADED_DRAFT_NOISE, ensure_graded_drafts
from e2e.vllm.serve import running_vllm_server
from e2e.vllm.venvs import ensure_tiny_models, venv_python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.vllm.measure_drafts", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="drafts (default: all graded drafts)")
    ap.add_argument("-n", type=int, default=12, help="greedy requests per draft")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("-k", type=int, default=3, help="num_speculative_tokens")
    args = ap.parse_args(argv)
    python = venv_python()
    models = {**ensure_tiny_models(python), **ensure_graded_drafts(python)}
    for name in args.names or list(GRADED_DRAFT_NOISE):
        spec = {"method": "draft_model", "model": name, "num_speculative_tokens": args.k}
        t0 = time.monotonic()
        with running_vllm_server(["--speculative-config", json.dumps(spec)], python=python, models=models) as srv:
            startup = time.monotonic() - t0
            before = srv.spec_counters()
            load = run_load(srv.url, n=args.n, concurrency=2, temperature=0.0, max_tokens=args.max_tokens)
            delta = srv.spec_counters() - before
        print(
            json.dumps(
                {
                    "draft": name,
                    "sigma": GRADED_DRAFT_NOISE.get(name),
                    "k": args.k,
                    "accepted": delta.accepted_tokens,
                    "draft_tokens": delta.draft_tokens,
                    "acceptance": None if delta.acceptance is None else round(delta.acceptance, 3),
                    "mean_acceptance_length": delta.mean_acceptance_length,
                    "requests_ok": load.ok,
                    "tokens_per_s": load.tokens_per_s,
                    "startup_s": round(startup, 1),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

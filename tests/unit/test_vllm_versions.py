"""vLLM versions compare in PEP 440 order: a release candidate is not yet the release it precedes."""

from __future__ import annotations

import pytest

from specpilot.vllm.versions import DYNAMIC_SPECULATION, VllmVersion, v


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("0.24.0.rc1", "0.24.0"),
        ("0.24.0rc1", "0.24.0rc2"),
        ("0.24.0.dev3", "0.24.0rc1"),
        ("0.24.0", "0.24.0.post1"),
        ("0.23.9", "0.24.0.rc1"),
        ("v0.8.5", "v0.8.5.post1"),
        ("0.9.2", "0.10.0"),
    ],
)
def test_order(older: str, newer: str) -> None:
    assert v(older) < v(newer)
    assert not v(newer) < v(older)


@pytest.mark.parametrize(
    ("text", "supports_dynamic_speculation"),
    [("0.24.0.rc1", False), ("0.24.0rc1", False), ("0.24.0", True), ("0.24.0.post1", True), ("0.24.1rc1", True)],
)
def test_a_release_candidate_is_not_the_release(text: str, supports_dynamic_speculation: bool) -> None:
    assert (v(text) >= DYNAMIC_SPECULATION) is supports_dynamic_speculation


@pytest.mark.parametrize(
    ("text", "same_as"),
    [
        ("0.32.0+cpu", "0.32.0"),  # a local label names a build of the release
        ("0.24.0.RC1", "0.24.0rc1"),  # PEP 440 normalisation
        ("0.33.0-custom", "0.33.0"),  # not PEP 440: the X.Y.Z release it names
        (" 0.33.0 ", "0.33.0"),
    ],
)
def test_equal_releases(text: str, same_as: str) -> None:
    assert v(text) == v(same_as)
    assert str(v(text)) == str(v(same_as))


@pytest.mark.parametrize("text", ["", "abc", "0.33", "latest"])
def test_not_a_version(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a vLLM version; expected MAJOR\.MINOR\.PATCH"):
        VllmVersion.parse(text)

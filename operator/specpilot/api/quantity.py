"""Kubernetes resource quantities ("500m", "8Gi", "1e3"), parsed exactly as the API server parses them.

A line-by-line port of `ParseQuantity`/`parseQuantityString` and the suffix table of k8s.io/apimachinery
pkg/api/resource (v0.37, quantity.go and suffix.go), so `specpilot validate` accepts the same strings as
kube-apiserver, including its oddities ("1.", ".5", "+" and "." all parse; "1e1.5" and "1Ki5" do not). The
published OpenAPI pattern for quantities is looser than the parser, which is why the CRD checks these fields with
CEL's `isQuantity()` (the same parser) rather than a regex. No kubernetes import: the api package stays pure.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
# suffix -> (base, exponent): decSuffixes and binSuffixes of suffix.go
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_INT64_MAX = 2**63 - 1


class InvalidQuantity(ValueError):
    """The string is not a quantity the API server would accept."""


def _split(text: str) -> tuple[bool, str, str, str, bool]:
    """parseQuantityString: (positive, numerator, denominator, suffix, any digit before the suffix).

    InvalidQuantity for ErrFormatWrong.
    """
    positive = True
    pos, end = 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", "", True
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise InvalidQuantity(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    digits = any(c in _DIGITS for c in text[:suffix_start])
    return positive, num, denom, text[suffix_start:], digits


def _go_parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): optional sign, ASCII digits only, within int64."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or any(c not in _DIGITS for c in body):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity string; InvalidQuantity with the API server's reason when it does not parse."""
    if not text:
        raise InvalidQuantity(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    if text == "0":
        return Decimal(0)
    positive, num, denom, suffix, digits = _split(text)
    if suffix in _DECIMAL:
        base, exponent = 10, _DECIMAL[suffix]
    elif suffix in _BINARY:
        base, exponent = 2, _BINARY[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE":
        parsed = _go_parse_int64(suffix[1:])
        if parsed is None:
            raise InvalidQuantity("unable to parse quantity's suffix")
        base, exponent = 10, (parsed + 2**31) % 2**32 - 2**31  # Go's int32(parsed) wraps
    else:
        raise InvalidQuantity("unable to parse quantity's suffix")
    if not digits and base == 10 and exponent - len(denom) < -9:
        # below nano scale the parser takes its inf.Dec path, whose SetString needs a digit ("no digits read")
        raise InvalidQuantity("unable to parse quantity's numeric value")
    with localcontext() as ctx:
        ctx.prec = 200
        ctx.Emax = 10**12
        ctx.Emin = -(10**12)
        magnitude = Decimal(f"{num}.{denom or '0'}")
        value = magnitude.scaleb(exponent) if base == 10 else magnitude * (Decimal(2) ** exponent)
        return value if positive else -value


def is_positive_quantity(text: str) -> bool:
    """A quantity the API server parses and that is greater than zero (what a CPU or memory size must be)."""
    try:
        return parse_quantity(text) > 0
    except InvalidQuantity:
        return False


def format_bytes(size_bytes: int) -> str:
    """A byte count in the largest binary unit that states it exactly ("8Gi", "1536Mi", "1000")."""
    if size_bytes <= 0:
        raise ValueError(f"a size must be positive, got {size_bytes}")
    for suffix, exponent in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if size_bytes % (1 << exponent) == 0:
            return f"{size_bytes >> exponent}{suffix}"
    return str(size_bytes)

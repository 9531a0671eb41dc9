"""The documentation stays true: every relative link and anchor resolves, every alert has a runbook section."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "specpilot" / "rules" / "specpilot.rules.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/specpilot/specpilot/blob/main/docs/runbooks.md#"
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes for the file's headings (repeated headings get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_lines(path.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = github_anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    links = []
    for line in prose_lines(path.read_text()):
        links += [t for t in LINK.findall(INLINE_CODE.sub("", line)) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]
    return links


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of one file whose target file or anchor does not exist, as 'file: link (why)'."""
    problems = []
    for link in relative_links(path):
        target, _, anchor = link.partition("#")
        resolved = (path.parent / unquote(target)).resolve() if target else path
        where = f"{path.relative_to(root)}: {link}"
        if not resolved.is_relative_to(root):
            problems.append(f"{where} (outside the repository)")
        elif not resolved.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where} (no heading with anchor #{anchor} in {resolved.relative_to(root)})")
    return problems


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("GitOps: what belongs in git", "gitops-what-belongs-in-git"),
        ("What `make demo` shows", "what-make-demo-shows"),
        (
            "vLLM's own adaptation (adaptive verification, the K = 0 tax)",
            "vllms-own-adaptation-adaptive-verification-the-k--0-tax",
        ),
        ("SpecpilotAcceptanceLow", "specpilotacceptancelow"),
        ("Decision benchmark results", "decision-benchmark-results"),
        (
            "The oracle within the deployment's actuation budget (`oracle-within-budget`)",
            "the-oracle-within-the-deployments-actuation-budget-oracle-within-budget",
        ),
    ],
)
def test_github_anchor(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_the_checker_sees_links_and_refuses_a_broken_one(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-section) [self](#page) [web](https://example.com/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [out](../outside.md)\n\n```\n[in code](ignored.md)\n```\n"
    )
    (tmp_path.parent / "outside.md").write_text("# Outside\n")
    assert relative_links(page) == ["other.md#a-section", "#page", "missing.md", "other.md#nope", "../outside.md"]
    assert broken_links(page, root=tmp_path) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nope (no heading with anchor #nope in other.md)",
        "page.md: ../outside.md (outside the repository)",
    ]


def test_no_tracked_file_cites_the_shared_reference_notes() -> None:
    """Sources are cited as papers, vLLM PRs or measurements, never as files outside the repository."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    outside = re.compile(r"\.\./shared/|shared/reference/")
    citing = [
        name
        for name in tracked.splitlines()
        if name != "tests/unit/test_docs.py"
        and (ROOT / name).is_file()
        and outside.search((ROOT / name).read_bytes().decode("utf-8", "replace"))
    ]
    assert citing == []


def test_every_relative_link_and_anchor_in_the_docs_resolves() -> None:
    assert len(DOCS) > 10, DOCS
    problems = [problem for path in DOCS for problem in broken_links(path)]
    assert problems == []


def alerts() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_every_alert_has_a_runbook_url_into_its_own_section_of_runbooks_md() -> None:
    found = alerts()
    assert len(found) >= 10, [a["alert"] for a in found]
    sections = anchors(RUNBOOKS)
    problems = []
    for alert in found:
        name = str(alert["alert"])
        annotations = alert.get("annotations")
        url = annotations.get("runbook_url", "") if isinstance(annotations, dict) else ""
        if url != RUNBOOK_BASE + name.lower():
            problems.append(f"{name}: runbook_url is {url!r}, expected {RUNBOOK_BASE + name.lower()!r}")
        if name.lower() not in sections:
            problems.append(f"{name}: no section '## {name}' in docs/runbooks.md")
    assert problems == []


def test_the_readme_stays_short_and_installs_first() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    assert any("helm install" in line for line in lines[:80])
    assert any(line.startswith("make demo") for line in lines)
    assert any(line.startswith("make test") for line in lines)

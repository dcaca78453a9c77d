"""The README is the newcomer's page: it links to the docs pages that hold the rest, and every link resolves."""

import re

from autograde import REPO

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PAGE = re.compile(r"`?(docs/[\w.-]+\.(?:md|png))`?")


def test_every_local_link_and_docs_page_the_readme_names_exists():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    named = {m for m in LINK.findall(readme) if not m.startswith(("http://", "https://"))} | set(PAGE.findall(readme))
    assert {
        "docs/measurements.md",
        "docs/engines.md",
        "docs/instructors.md",
        "docs/grading.md",
        "docs/classroom.md",
        "docs/contract.md",
    } <= named, sorted(named)
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"README.md names files that do not exist: {missing}"


def test_the_docs_pages_link_only_to_files_that_exist():
    for page in sorted((REPO / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert (page.parent / target).exists() or (REPO / target).exists(), f"{page.name}: {target}"

"""User documentation speaks to users: no development-log names.

The algorithm names of the papers' authors ("OffWP", "OnWP", "OnWDP") and
issue numbers ("#21", "issue 22") mean nothing to a reader of the guides;
the history of the code lives in docs/changes.md only.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[1]
USER_PAGES = [ROOT / "README.md",
              *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "changes.md")]

DEVELOPMENT_LOG = re.compile(r"\b(?:OffWP|OnWP|OnWDP)\b|(?<![\w&])#\d+\b|\bissue\s+#?\d+",
                             re.IGNORECASE)


@pytest.mark.parametrize("path", USER_PAGES, ids=lambda p: p.name)
def test_user_pages_have_no_development_log_names(path):
    found = [(n, line.strip()) for n, line in enumerate(path.read_text().splitlines(), 1)
             if DEVELOPMENT_LOG.search(line)]
    assert not found, f"{path.name}: {found}"


def test_the_pattern_finds_what_it_is_for():
    hits = ["the offline fit (OffWP)", "since #21", "see issue 22", "Issue #25"]
    misses = ["[Randomness](#randomness-copies-and-continuation)", "# 4 sites",
              "color: #fff", "&#8212;", "issues of the tracker"]
    assert all(DEVELOPMENT_LOG.search(h) for h in hits)
    assert not any(DEVELOPMENT_LOG.search(m) for m in misses)

"""Every ```python block of README.md and docs/*.md runs as printed.

The blocks of one file run in order in one namespace (``__name__ ==
"__main__"``, as a script), from an empty folder. Markers, on the line before
a block or as the block's first line:

* ``<!-- requires: flwr -->`` or ``# requires: dask``: the block needs those
  importable modules (comma-separated); it is skipped where one is missing.
* ``<!-- not run: reason -->``: the block is not meant to run (a file of a
  deployment, a sketch of a command); the reason is mandatory.
"""

import importlib.util
import pathlib
import re
import textwrap
import warnings

import pytest

ROOT = pathlib.Path(__file__).parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

BLOCK = re.compile(r"(?:<!--\s*(?P<marker>[^>]*?)\s*-->\s*\n)?```python\n(?P<code>.*?)```",
                   re.DOTALL)
FIRST_LINE_REQUIRES = re.compile(r"#\s*requires:\s*(.+)")

# Pages whose every block needs an extra (until the page marks its blocks):
# the page's name -> the modules.
PAGE_REQUIRES = {}

# Blocks that fail as printed, whose file belongs to ongoing work: the file's
# name -> the reason (the test then xfails, strictly: it must start passing
# once the file is fixed).
KNOWN_FAILING = {}


def blocks(path):
    """``(code, requires, not_run_reason)`` of each python block of ``path``."""
    found = []
    for match in BLOCK.finditer(path.read_text()):
        # a block inside a list item is indented with it
        code, marker = textwrap.dedent(match["code"]), (match["marker"] or "")
        requires, not_run = [], None
        if marker.startswith("requires:"):
            requires = marker.partition(":")[2].split(",")
        elif marker.startswith("not run:"):
            not_run = marker.partition(":")[2].strip()
            assert not_run, f"{path.name}: a not-run block needs a reason"
        first = FIRST_LINE_REQUIRES.match(code.lstrip().splitlines()[0] if code.strip() else "")
        if first:
            requires += first[1].split(",")
        requires += PAGE_REQUIRES.get(path.name, [])
        found.append((code, [r.strip() for r in requires if r.strip()], not_run))
    return found


def _missing(modules):
    return [m for m in modules if importlib.util.find_spec(m) is None]


# importing flwr (docs/flower.md) warns about its own dependencies (typer, click)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", [p for p in FILES if blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run_as_printed(path, tmp_path, monkeypatch, request):
    if path.name in KNOWN_FAILING:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_FAILING[path.name], strict=True))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace = {"__name__": "__main__"}
    ran = 0
    for i, (code, requires, not_run) in enumerate(blocks(path)):
        if not_run or _missing(requires):
            continue
        with warnings.catch_warnings():
            # a snippet that seeds private noise warns, as it should; the text says why
            warnings.simplefilter("ignore", category=UserWarning)
            exec(compile(code, f"{path.name}[block {i}]", "exec"), namespace)
        ran += 1
    if not ran:
        pytest.skip(f"every block of {path.name} needs a missing extra")


def test_markers_are_read(tmp_path):
    sample = tmp_path / "sample.md"
    sample.write_text(
        "<!-- requires: flwr, dask -->\n```python\na = 1\n```\n"
        "<!-- not run: a file of the deployment -->\n```python\nb = 2\n```\n"
        "```python\n# requires: dask\nc = 3\n```\n```python\nd = 4\n```\n"
    )
    assert blocks(sample) == [
        ("a = 1\n", ["flwr", "dask"], None),
        ("b = 2\n", [], "a file of the deployment"),
        ("# requires: dask\nc = 3\n", ["dask"], None),
        ("d = 4\n", [], None),
    ]

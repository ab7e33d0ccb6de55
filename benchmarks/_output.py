"""Where a benchmark script writes its files, and the line that says so.

Every script takes ``--output-dir`` (default: ``benchmarks/results`` beside
the scripts) and prints the absolute path of every file it writes.
"""

import argparse
import pathlib
import re

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def plain_text(doc):
    """A docstring as plain help text: no ``literal`` quotes or :role:`x` markup."""
    doc = re.sub(r":[a-z:]+:`~?([^`]+)`", r"\1", doc or "")
    return doc.replace("``", "").strip()


def benchmark_parser(doc, quick_help="small sizes (seconds to minutes), *_quick files"):
    """The parser every benchmark script starts from: its docstring as plain
    description (line breaks kept), ``--quick`` and ``--output-dir``."""
    parser = argparse.ArgumentParser(
        description=plain_text(doc), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help=quick_help)
    add_output_dir(parser)
    return parser


def add_output_dir(parser):
    """Add ``--output-dir`` to an ``argparse`` parser."""
    parser.add_argument(
        "--output-dir", type=pathlib.Path, default=RESULTS,
        help="folder for the result files, created if missing (default: benchmarks/results)",
    )


def output_dir(path):
    """The absolute folder ``path``, created if missing."""
    path = pathlib.Path(path).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def wrote(path):
    """Say where a file was written (absolute path)."""
    print(f"wrote {pathlib.Path(path).resolve()}", flush=True)


def markdown_table(rows, columns, fmt=str, header=None):
    """A markdown table of ``rows`` (dicts), one column per key of
    ``columns``, headed by ``header`` (default: the keys), each cell
    ``fmt(value)``."""
    header = list(columns) if header is None else list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)

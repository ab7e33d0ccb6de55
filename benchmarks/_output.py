"""Where a benchmark script writes its files, and the line that says so.

Every script takes ``--output-dir`` (default: ``benchmarks/results`` beside
the scripts) and prints the absolute path of every file it writes.
"""

import pathlib

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


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

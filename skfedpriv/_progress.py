"""A dependency-free text progress bar for long command-line runs."""

import sys
import time


def progress(iterable, total=None, label="", stream=None, width=30):
    """Yield from ``iterable`` while drawing ``label [#####.....] k/n  12s``.

    Draws on ``stream`` (default: standard error) only when it is a terminal
    or when ``stream`` is given, so logs and CI output stay clean.

    >>> import io
    >>> out = io.StringIO()
    >>> list(progress(range(3), label="reps", stream=out))
    [0, 1, 2]
    >>> "3/3" in out.getvalue()
    True
    """
    if total is None:
        total = len(iterable) if hasattr(iterable, "__len__") else None
    if stream is None:
        stream = sys.stderr
        if not (hasattr(stream, "isatty") and stream.isatty()):
            yield from iterable
            return
    start = time.perf_counter()
    for done, item in enumerate(iterable, 1):
        yield item
        elapsed = time.perf_counter() - start
        if total:
            filled = int(width * done / total)
            bar = "#" * filled + "." * (width - filled)
            stream.write(f"\r{label} [{bar}] {done}/{total}  {elapsed:.0f}s")
        else:
            stream.write(f"\r{label} {done}  {elapsed:.0f}s")
        stream.flush()
    stream.write("\n")
    stream.flush()

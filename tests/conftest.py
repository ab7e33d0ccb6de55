import os
import shutil
import tempfile
from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "flower_e2e: starts a Flower SuperLink and SuperNodes on 127.0.0.1 (minutes; "
        "runs only with SKFEDPRIV_FLOWER_E2E=1)",
    )


def pytest_collection_modifyitems(config, items):
    """The multi-process Flower tests take minutes: run them on request only.

    Selected by their explicit ``flower_e2e`` marker (not by a keyword, which
    would also match every test and doctest of ``skfedpriv.flower``).
    """
    if os.environ.get("SKFEDPRIV_FLOWER_E2E") == "1":
        return
    skip = pytest.mark.skip(reason="multi-process Flower test; set SKFEDPRIV_FLOWER_E2E=1")
    for item in items:
        if item.get_closest_marker("flower_e2e") is not None:
            item.add_marker(skip)


@pytest.fixture
def ledger_dir(tmp_path):
    """A fresh directory for the site ledger files of one test: in memory
    (``/dev/shm``) where the system has one, since every release a private
    site makes is an SQLite transaction (~15 ms on a shared disk)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="skfedpriv-ledgers-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def import_benchmark(name):
    """Import ``benchmarks/<name>.py`` (its folder on ``sys.path`` while it
    loads its sibling modules); a generator for a module-scoped fixture."""
    import importlib
    import sys

    folder = str(Path(__file__).parents[1] / "benchmarks")
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(folder)

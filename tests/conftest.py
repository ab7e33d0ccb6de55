import os

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "flower: starts a Flower SuperLink and SuperNodes on 127.0.0.1 (minutes; "
        "runs only with SKFEDPRIV_FLOWER_E2E=1)",
    )


def pytest_collection_modifyitems(config, items):
    """The multi-process Flower tests take minutes: run them on request only."""
    if os.environ.get("SKFEDPRIV_FLOWER_E2E") == "1":
        return
    skip = pytest.mark.skip(reason="multi-process Flower test; set SKFEDPRIV_FLOWER_E2E=1")
    for item in items:
        if "flower" in item.keywords:
            item.add_marker(skip)

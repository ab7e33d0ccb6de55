def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "flower: starts a Flower SuperLink and SuperNodes on 127.0.0.1 (slow; "
        "deselect with -m 'not flower')",
    )

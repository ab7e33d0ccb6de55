"""Helpers of the sphinx-gallery build (referenced by name from conf.py, so
the configuration stays picklable)."""

import functools

_ORIGINAL_CLOSE = None


def keep_figures_open(gallery_conf, fname, when):
    """While an example runs, make ``pyplot.close(fig)`` a no-op.

    The examples close their figure at the end so that they can run as plain
    scripts (and in the test suite) without piling up figures; in the gallery
    the figure must still be open when sphinx-gallery's scraper looks for it
    after the code block. The scraper itself closes figures with
    ``close("all")``, which still works. Installed before and removed after
    every example (``reset_modules_order='both'``).
    """
    global _ORIGINAL_CLOSE
    try:
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure
    except ImportError:
        return
    if when == "before" and _ORIGINAL_CLOSE is None:
        original = plt.close

        @functools.wraps(original)
        def close(fig=None):
            if isinstance(fig, Figure):
                return None
            return original(fig)

        _ORIGINAL_CLOSE = original
        plt.close = close
    elif when == "after" and _ORIGINAL_CLOSE is not None:
        plt.close = _ORIGINAL_CLOSE
        _ORIGINAL_CLOSE = None

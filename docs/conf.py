"""Sphinx configuration of the skfedpriv documentation.

Build with ``docs/build.sh`` (warnings are errors).
"""

import os
from importlib.util import find_spec

# The gallery runs every example at its small size (as the test suite does)
# so the build stays fast; set SKFEDPRIV_QUICK=0 to build full-size figures.
os.environ.setdefault("SKFEDPRIV_QUICK", "1")

import skfedpriv  # noqa: E402

project = "skfedpriv"
author = "skfedpriv developers"
copyright = "skfedpriv developers"
version = release = skfedpriv.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "build.sh", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip"]

# API pages list their members explicitly; no generated stub files.
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# Cross-references to numpy/scipy/sklearn resolve without the network:
# intersphinx inventories are not fetched (the build must work offline), so
# unresolved external references stay plain text and nitpicky mode is off.
intersphinx_mapping = {}

# Example gallery: every examples/plot_*.py is executed during the build and
# becomes a page of docs/auto_examples/ (generated, not committed). A failing
# example fails the build.
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py$",
    "image_scrapers": ("matplotlib",) if find_spec("matplotlib") else (),
    "reset_modules": ("matplotlib",),
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "write_computation_times": True,
}

html_theme = "alabaster"
html_title = f"skfedpriv {release}"
html_static_path = []


def _escape_shape_targets(app, what, name, obj, options, lines):
    """``(n_features_in_,)`` in a numpydoc type reads as an RST link target
    (a trailing underscore); show it as literal text instead. Docstrings
    written as ``(``n_features_in_``,)`` need no help."""
    for i, line in enumerate(lines):
        lines[i] = line.replace("(n_features_in_,)", "(``n_features_in_``,)")


def setup(app):
    app.connect("autodoc-process-docstring", _escape_shape_targets)

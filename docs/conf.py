"""Sphinx configuration of the skfedpriv documentation.

Build with ``docs/build.sh`` (warnings are errors).
"""

import skfedpriv

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
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "build.sh"]

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

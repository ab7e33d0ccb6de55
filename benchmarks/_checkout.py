"""Put the checkout this script is in before an installed copy of skfedpriv.

``python benchmarks/bench_x.py`` puts ``benchmarks/`` first on ``sys.path``,
not the checkout's root, so without this an editable install of another
checkout (e.g. the main one, when the script runs from a worktree) would be
measured instead. Import it before anything from skfedpriv.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)

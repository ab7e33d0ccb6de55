"""
Gossip topologies for DecentralizedLogisticRegression
=====================================================

Nine learners with no server exchange messages only with their neighbours. A
better connected graph has a larger spectral gap ``ρ = 1 - σ₂(P)`` of its
mixing matrix; the default block size (eq. 7 of the paper) grows as ``ρ``
shrinks. Here ``block_size=4`` is fixed so that a short stream has several
blocks on every graph, and the graphs differ only in how well four gossip
steps mix. We stream scikit-learn's digits once through PD-FTGL on the
complete graph, a 3×3 grid, a Watts-Strogatz small world (average degree 6,
rewiring probability 0.5: the paper's Figure 5) and a ring, non-private and
at ε = 1 over the whole run, and report the test accuracy of the averaged
model and the spread of the learners' own accuracies. Rows are scaled with
``BoundedScaler`` (pixel intensities lie in the public range ``[0, 16]``),
so no preprocessing reads the data.
"""

# %%
import os
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from skfedpriv import DecentralizedLogisticRegression
from skfedpriv.preprocessing import BoundedScaler
from skfedpriv.privacy import SeededNoiseWarning

# The noise seeds below make the figure reproducible, as a release must not be
# (random_state=None draws fresh noise): the warning that says so is off here.
warnings.filterwarnings("ignore", category=SeededNoiseWarning)
# SKFEDPRIV_QUICK=1 (the docs build and the tests set it): a small, fast run
QUICK = os.environ.get("SKFEDPRIV_QUICK") == "1"
n_classes = 4 if QUICK else 10
X, y = load_digits(n_class=n_classes, return_X_y=True)
X = BoundedScaler(lower=0, upper=16).fit_transform(X)
X, X_test, y, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
learners = np.arange(len(y)) % 9

# %%
results = {}
for topology in ("complete", "watts-strogatz", "grid", "ring"):
    for epsilon in (None, 1.0):
        # declared label set (public); a fixed seed for a reproducible figure
        clf = DecentralizedLogisticRegression(
            topology=topology, block_size=4,
            mechanism=None if epsilon is None else "laplace",
            epsilon=1.0 if epsilon is None else epsilon,
            classes=np.arange(n_classes), random_state=0,
        ).fit(X, y, sample_group=learners)
        own = [np.mean(clf.predict(X_test, learner=label) == y_test)
               for label in clf.learner_labels_]
        results[topology, epsilon] = (clf.score(X_test, y_test), min(own), max(own),
                                      clf.spectral_gap_, clf.gossip_steps_)
for (topology, epsilon), (avg, low, high, gap, steps) in results.items():
    print(f"{topology:>8} eps={epsilon!s:>4}: averaged {avg:.3f}, learners "
          f"{low:.3f}-{high:.3f}, spectral gap {gap:.3f}, gossip steps/block {steps}")

# %%
# The plot (skipped when matplotlib is not installed).
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, ax = plt.subplots(figsize=(7, 4))
    names = ["complete", "watts-strogatz", "grid", "ring"]
    for offset, epsilon in ((-0.15, None), (0.15, 1.0)):
        values = np.array([results[t, epsilon][:3] for t in names])
        positions = np.arange(len(names)) + offset
        line, = ax.plot(positions, values[:, 0], "o",
                        label="non-private" if epsilon is None else f"ε = {epsilon:g}")
        ax.vlines(positions, values[:, 1], values[:, 2], color=line.get_color())
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{t}\nρ = {results[t, None][3]:.2f}" for t in names])
    ax.set_ylabel("test accuracy (dot: averaged model; bar: learners)")
    ax.set_title("PD-FTGL over four gossip graphs, 9 learners")
    ax.legend()
    fig.tight_layout()
    if plt.get_backend().lower() != "agg":
        plt.show()

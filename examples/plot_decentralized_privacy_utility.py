"""
Privacy-utility of DecentralizedLogisticRegression: accuracy against epsilon
============================================================================

Nine learners on a complete gossip graph, with no server, stream
scikit-learn's digits once: each learner receives one image per round and
the learners exchange only gossip messages. With ``mechanism='laplace'`` the
decisions of all learners over *all* rounds are (ε, 0)-differentially
private with respect to replacing one image (Laplace noise in each
learner's binary tree of block gradient sums). We sweep ε for PD-FTGL
(``solver='ftgl'``, projected steps) and PD-OCG (``solver='ocg'``,
conditional-gradient steps) and compare the test accuracy of the averaged
model with the same solver without noise and with chance.

The stream is short (a few dozen rounds per learner in quick mode, about 140
at full size) and the guarantee is pure ε over the whole stream, so the
private models need a large ε to approach the non-private ones; a longer
stream spreads the same noise over more rounds. ``block_size=4`` is fixed,
as in the gossip-topology example, so that a short stream has several
blocks. Rows are scaled with ``BoundedScaler`` (pixel intensities lie in the
public range ``[0, 16]``), so no preprocessing reads the data.
"""

# %%
# Data: the digits, split into nine learners' streams.
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
epsilons = [2.0, 8.0, 32.0, 128.0, 512.0]
if not QUICK:
    epsilons = [1.0] + epsilons + [2048.0]
repeats = 3 if QUICK else 10

X, y = load_digits(n_class=n_classes, return_X_y=True)
X = BoundedScaler(lower=0, upper=16).fit_transform(X)
X, X_test, y, y_test = train_test_split(X, y, test_size=0.3, stratify=y,
                                        random_state=0)
learners = np.arange(len(y)) % 9


def accuracy(solver, epsilon, seed):
    """Test accuracy of the learners' averaged model after one pass."""
    # the label set is declared (public), not read from the private rows;
    # fixed seeds make the figure reproducible (the package warns about them:
    # a real release draws its noise with random_state=None)
    clf = DecentralizedLogisticRegression(
        topology="complete", solver=solver, block_size=4,
        mechanism=None if epsilon is None else "laplace",
        epsilon=1.0 if epsilon is None else epsilon,
        classes=np.arange(n_classes), random_state=seed)
    return clf.fit(X, y, sample_group=learners).score(X_test, y_test)


# %%
# The sweep: each private point is the mean over ``repeats`` noise draws.
baseline, curves = {}, {}
for solver in ("ftgl", "ocg"):
    baseline[solver] = accuracy(solver, None, 0)
    curves[solver] = [np.mean([accuracy(solver, eps, seed) for seed in range(repeats)])
                      for eps in epsilons]
chance = np.max(np.bincount(y_test)) / len(y_test)
print(f"{n_classes} classes, {len(y) // 9} rounds per learner, chance {chance:.3f}")
for solver, values in curves.items():
    print(f"{solver}: no noise {baseline[solver]:.3f};",
          " ".join(f"eps={e:g}:{a:.3f}" for e, a in zip(epsilons, values)))

# %%
# The plot (skipped when matplotlib is not installed).
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for solver, values in curves.items():
        line, = ax.plot(epsilons, values, "o-", label=f"solver={solver!r}")
        ax.axhline(baseline[solver], color=line.get_color(), linestyle="--",
                   label=f"solver={solver!r}, no noise")
    ax.axhline(chance, color="grey", linestyle=":", label="chance")
    ax.set_xscale("log")
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.minorticks_off()
    ax.set_xlabel("ε (pure, all rounds)")
    ax.set_ylabel("test accuracy of the averaged model")
    ax.set_title(f"DecentralizedLogisticRegression, 9 learners, {n_classes} digits")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if plt.get_backend().lower() != "agg":
        plt.show()

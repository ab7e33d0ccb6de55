"""
A partial_fit stream: online against offline
=============================================

``DWDClassifier.partial_fit`` keeps only summaries of past batches (the
parameters and the accumulated curvature, ``O(p²)`` numbers) and no rows.
After each batch we compare its test accuracy with the offline fit on all
rows seen so far, for the published single step (``online_steps=1``, eq. 37
of the genDWD paper) and for the default, which solves the renewable
estimating equation for each batch.
"""

# %%
import os

import numpy as np

from skfedpriv import DWDClassifier
from skfedpriv.datasets import make_federated_gaussians

# SKFEDPRIV_QUICK=1 (the docs build and the tests set it): a small, fast run
QUICK = os.environ.get("SKFEDPRIV_QUICK") == "1"
n_batches = 6 if QUICK else 50
kwargs = dict(n_sites=5, n_per_batch=10, n_features=20, mu=0.25, ratio=4.0)
X, y, sites, batch = make_federated_gaussians(n_batches=n_batches, random_state=0, **kwargs)
X_test, y_test, _, _ = make_federated_gaussians(n_batches=20, random_state=1, **kwargs)

# %%
# One pass over the stream; the offline model is refitted on every prefix.
online = {steps: DWDClassifier(online_steps=steps) for steps in (1, 10)}
history = {"offline": [], **{f"online_steps={s}": [] for s in online}}
for b in range(n_batches):
    rows = batch == b
    for steps, clf in online.items():
        clf.partial_fit(X[rows], y[rows], sample_group=sites[rows], classes=[-1, 1])
        history[f"online_steps={steps}"].append(clf.score(X_test, y_test))
    seen = batch <= b
    offline = DWDClassifier().fit(X[seen], y[seen], sample_group=sites[seen])
    history["offline"].append(offline.score(X_test, y_test))

for name, accuracy in history.items():
    print(f"{name:>16}: final accuracy {accuracy[-1]:.3f}")

# %%
# The plot (skipped when matplotlib is not installed).
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, accuracy in history.items():
        ax.plot(np.arange(1, n_batches + 1), accuracy, label=name)
    ax.set_xlabel("batches seen")
    ax.set_ylabel("test accuracy")
    ax.set_title("DWDClassifier: renewable stream vs offline refit")
    ax.legend()
    fig.tight_layout()
    if plt.get_backend().lower() != "agg":
        plt.show()

"""
Privacy-utility of LogisticRegression: accuracy against epsilon
===============================================================

Ten learners stream the two-Gaussian simulation of the genDWD paper through
``LogisticRegression`` (online federated logistic regression with local
steps, Zhang, Zhu, Fay and Johansson). Each learner's messages over all
``n_rounds`` rounds are (ε, δ)-differentially private against the server.
For each ε we train with independent noise and with correlated (Toeplitz)
noise at the same step size and compare their test accuracy with the same
algorithm without noise and with the Bayes accuracy.

Rows are clipped to ``feature_clip_norm`` by the estimator (a bound fixed in
advance, never read from the data) and the step size is the largest that
keeps the local steps non-expansive, ``η = 8 / (C_x² + 1)``, so the smaller
sensitivity ``2 B_g / τ`` applies.
"""

# %%
# Data: ten learners, five new rows each per round.
import os
import warnings

import numpy as np

from skfedpriv import LogisticRegression
from skfedpriv.datasets import gaussian_bayes_accuracy, make_federated_gaussians
from skfedpriv.privacy import SeededNoiseWarning

# The noise seeds below make the figure reproducible, as a release must not be
# (random_state=None draws fresh noise): the warning that says so is off here.
warnings.filterwarnings("ignore", category=SeededNoiseWarning)
# SKFEDPRIV_QUICK=1 (the docs build and the tests set it): a small, fast run
QUICK = os.environ.get("SKFEDPRIV_QUICK") == "1"
n_features, mu, tau = 10, 0.3, 5
n_rounds = 40 if QUICK else 200
epsilons = [0.5, 2.0, 8.0] if QUICK else [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
repeats = 1 if QUICK else 5
delta = 1e-5

X, y, learners, _ = make_federated_gaussians(
    n_sites=10, n_batches=n_rounds, n_per_batch=tau, n_features=n_features,
    mu=mu, random_state=0)
X_test, y_test, _, _ = make_federated_gaussians(
    n_sites=10, n_batches=100, n_per_batch=tau, n_features=n_features, mu=mu,
    random_state=1)
feature_clip_norm = 1.2 * np.sqrt(n_features)    # public, not read from X
learning_rate = 8.0 / (feature_clip_norm**2 + 1)


def accuracy(**params):
    """Test accuracy after one pass over the stream (``n_rounds`` rounds).

    ``fit`` splits every learner's rows, in order, into ``n_rounds`` blocks:
    block ``r`` holds its clients of round ``r``, as a ``partial_fit`` stream
    would.
    """
    clf = LogisticRegression(
        local_steps=tau, learning_rate=learning_rate, n_rounds=n_rounds,
        clip_norm=1.0, feature_clip_norm=feature_clip_norm, delta=delta,
        classes=[-1, 1], solver="local-steps",  # the paper's algorithm, also without noise
        **params)  # the label set is declared, not read from y
    return clf.fit(X, y, sample_group=learners).score(X_test, y_test)


# %%
# The sweep: each point is the mean over ``repeats`` noise draws.
baseline = accuracy()
bayes = gaussian_bayes_accuracy(n_features=n_features, mu=mu)
curves = {}
for mechanism in ("independent", "toeplitz"):
    curves[mechanism] = [
        np.mean([accuracy(mechanism=mechanism, epsilon=eps, random_state=seed)
                  for seed in range(repeats)])
        for eps in epsilons
    ]
print(f"no noise {baseline:.3f}, Bayes {bayes:.3f}")
for mechanism, values in curves.items():
    print(f"{mechanism:>11}:",
          " ".join(f"eps={e:g}:{a:.3f}" for e, a in zip(epsilons, values)))

# %%
# The plot (skipped when matplotlib is not installed).
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for mechanism, values in curves.items():
        ax.plot(epsilons, values, "o-", label=f"mechanism={mechanism!r}")
    ax.axhline(baseline, color="k", linestyle="--", label="no noise (not private)")
    ax.axhline(bayes, color="grey", linestyle=":", label="Bayes accuracy")
    ax.set_xscale("log")
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.minorticks_off()
    ax.set_xlabel(f"ε (δ = {delta:g}), whole stream, per learner")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"LogisticRegression, 10 learners, {n_rounds} rounds")
    ax.legend()
    fig.tight_layout()
    if plt.get_backend().lower() != "agg":
        plt.show()

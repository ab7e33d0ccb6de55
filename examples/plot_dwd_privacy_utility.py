"""
Privacy-utility of DWDClassifier: accuracy against epsilon
==========================================================

The genDWD paper's two-Gaussian simulation (section 6): ten sites, a stream
of batches. For each ε we train

* ``mechanism='local-gaussian'`` — every site noises every summary it
  sends; the guarantee covers the whole stream against the server;
* ``mechanism='gaussian'`` — Algorithm 2 as published (objective
  perturbation); ε is per release: every batch is a release and is charged
  (``privacy_spent_`` is ``n_batches × ε`` after the stream), and even that
  sum does not cover the stream (see the privacy page of the
  documentation);

on a ``partial_fit`` stream, beside the non-private stream and the Bayes
accuracy. Rows are clipped to ``clip_norm`` by the estimator (a bound set in
advance, never read from the data), and the label set is declared
(``classes``). The fixed noise seeds make the figure reproducible; a real
release must use ``random_state=None`` (the package warns about seeds with a
``SeededNoiseWarning``, which this example silences).
"""

# %%
# Data: a stream over ten sites, test rows from the same distribution.
import os
import warnings

import numpy as np

from skfedpriv import DWDClassifier
from skfedpriv.datasets import gaussian_bayes_accuracy, make_federated_gaussians
from skfedpriv.privacy import SeededNoiseWarning

# The noise seeds below make the figure reproducible, as a release must not be
# (random_state=None draws fresh noise): the warning that says so is off here.
warnings.filterwarnings("ignore", category=SeededNoiseWarning)
# SKFEDPRIV_QUICK=1 (the docs build and the tests set it): a small, fast run
QUICK = os.environ.get("SKFEDPRIV_QUICK") == "1"
n_batches, n_features = (5, 10) if QUICK else (40, 20)
epsilons = [0.5, 2.0, 8.0] if QUICK else [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
repeats = 1 if QUICK else 5
mu = 0.3

X, y, sites, batch = make_federated_gaussians(
    n_sites=10, n_batches=n_batches, n_per_batch=20, n_features=n_features,
    mu=mu, random_state=0)
X_test, y_test, _, _ = make_federated_gaussians(
    n_sites=10, n_batches=10, n_per_batch=20, n_features=n_features, mu=mu,
    random_state=1)
clip_norm = np.sqrt(n_features + 1)     # a public choice, not read from X


def stream_accuracy(**params):
    """Accuracy on the test rows after streaming every batch once."""
    clf = DWDClassifier(clip_norm=clip_norm if params.get("mechanism") else None,
                        classes=[-1, 1], **params)
    for b in range(n_batches):
        rows = batch == b
        clf.partial_fit(X[rows], y[rows], sample_group=sites[rows])
    return clf.score(X_test, y_test)


# %%
# The sweep: each point is the mean over ``repeats`` noise draws.
baseline = stream_accuracy()
bayes = gaussian_bayes_accuracy(n_features=n_features, mu=mu)
curves = {}
for mechanism in ("local-gaussian", "gaussian"):
    curves[mechanism] = [
        np.mean([stream_accuracy(mechanism=mechanism, epsilon=eps, delta=1e-5,
                                 random_state=seed) for seed in range(repeats)])
        for eps in epsilons
    ]
print(f"non-private stream {baseline:.3f}, Bayes {bayes:.3f}")
for mechanism, accuracy in curves.items():
    print(mechanism, " ".join(f"eps={e:g}:{a:.3f}" for e, a in zip(epsilons, accuracy)))

# %%
# The plot (skipped when matplotlib is not installed).
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for mechanism, accuracy in curves.items():
        ax.plot(epsilons, accuracy, "o-", label=f"mechanism={mechanism!r}")
    ax.axhline(baseline, color="k", linestyle="--", label="non-private stream")
    ax.axhline(bayes, color="grey", linestyle=":", label="Bayes accuracy")
    ax.set_xscale("log")
    ax.set_xlabel("ε (δ = 1e-5)")
    ax.set_ylabel("test accuracy")
    ax.set_title("DWDClassifier on a 10-site stream")
    ax.legend()
    fig.tight_layout()
    if plt.get_backend().lower() != "agg":
        plt.show()

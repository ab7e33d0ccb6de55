"""
Correlated against independent noise over rounds
================================================

``LogisticRegression`` runs Algorithm 1 of Zhang, Zhu, Fay and Johansson:
in every communication round each learner takes ``local_steps`` clipped
gradient steps on its new clients and sends the server a noisy update. The
noise of a learner's messages comes from a factorization ``A = B C`` of the
prefix-sum matrix: ``mechanism='independent'`` draws fresh noise every
round, while ``'tree'``, ``'toeplitz'`` and ``'blt'`` correlate it across
rounds so that much of it cancels in the running sum the model follows.
Every mechanism gives the same (ε, δ) guarantee for each learner's whole
sequence of messages; only the noise shape differs.

The data follow the benchmark of ``benchmarks/bench_logistic.py`` in small:
twenty learners with their own linear concept and feature shift (FedProx
"synthetic(0.1, 0.1)" made binary), five new clients per learner and round.
Rows are clipped to ``feature_clip_norm`` (a public bound), which allows the
smaller sensitivity ``2 B_g / τ`` as long as the local steps are non-
expansive, ``η <= 8 / (C_x² + 1)``.
"""

# %%
# A stream of rounds: every learner brings ``tau`` new clients per round.
import os
import warnings

import numpy as np

from skfedpriv import LogisticRegression
from skfedpriv.privacy import SeededNoiseWarning

# The noise seeds below make the figure reproducible, as a release must not be
# (random_state=None draws fresh noise): the warning that says so is off here.
warnings.filterwarnings("ignore", category=SeededNoiseWarning)
# SKFEDPRIV_QUICK=1 (the docs build and the tests set it): a small, fast run
QUICK = os.environ.get("SKFEDPRIV_QUICK") == "1"
n_features, n_learners, tau = (20, 10, 5) if QUICK else (50, 20, 5)
n_rounds = 60 if QUICK else 400
eval_every = 5 if QUICK else 20
repeats = 2 if QUICK else 3
epsilon, delta = 0.5, 1e-3


def synthetic(seed, n_test=100):
    """Binary FedProx synthetic(0.1, 0.1): learner k's rows and concept."""
    rng = np.random.default_rng(seed)
    scale = np.arange(1, n_features + 1) ** -0.6
    n_train = tau * n_rounds
    train, test = [], []
    for k in range(n_learners):
        shift = rng.normal(0, np.sqrt(0.1))
        w, b = rng.normal(shift, 1, size=n_features), rng.normal(shift, 1)
        centre = rng.normal(rng.normal(0, np.sqrt(0.1)), 1, size=n_features)
        X = centre + rng.normal(size=(n_train + n_test, n_features)) * scale
        y = (X @ w + b > 0).astype(int)
        train.append((X[:n_train], y[:n_train]))
        test.append((X[n_train:], y[n_train:]))
    X_test = np.vstack([X for X, _ in test])
    y_test = np.concatenate([y for _, y in test])
    return train, X_test, y_test


# Public bounds: rows have norm about sqrt(n_features) * 1.4, so clip there,
# and take the largest step that keeps the local steps non-expansive.
feature_clip_norm = 1.5 * np.sqrt(n_features)
learning_rate = 8.0 / (feature_clip_norm**2 + 1)


def run(mechanism, data, seed):
    """Test accuracy and log-loss every ``eval_every`` rounds."""
    train, X_test, y_test = data
    clf = LogisticRegression(
        local_steps=tau, learning_rate=learning_rate, n_rounds=n_rounds,
        mechanism=mechanism, epsilon=epsilon, delta=delta, clip_norm=1.0,
        feature_clip_norm=feature_clip_norm, random_state=seed,
        solver="local-steps")  # the paper's algorithm, also without noise
    learners = np.repeat(np.arange(n_learners), tau)
    curve = []
    for r in range(n_rounds):
        rows = slice(tau * r, tau * (r + 1))
        X = np.vstack([X[rows] for X, _ in train])
        y = np.concatenate([y[rows] for _, y in train])
        clf.partial_fit(X, y, sample_group=learners, classes=[0, 1])
        if (r + 1) % eval_every == 0:
            p = np.clip(clf.predict_proba(X_test)[:, 1], 1e-12, 1 - 1e-12)
            loss = -np.mean(y_test * np.log(p) + (1 - y_test) * np.log(1 - p))
            curve.append((np.mean((p > 0.5) == y_test), loss))
    return np.array(curve)


# %%
# Every mechanism on the same data and the same noise seed; the curves are
# means over ``repeats`` data sets.
mechanisms = [None, "independent", "tree", "toeplitz", "blt"]
curves = {m: 0.0 for m in mechanisms}
for rep in range(repeats):
    data = synthetic(seed=rep)
    for mechanism in mechanisms:
        curves[mechanism] = curves[mechanism] + run(mechanism, data, rep) / repeats
rounds = eval_every * np.arange(1, n_rounds // eval_every + 1)
print(f"(epsilon, delta) = ({epsilon}, {delta}), eta = {learning_rate:.4f}, "
      f"C_x = {feature_clip_norm:.2f}, {n_rounds} rounds")
for mechanism, curve in curves.items():
    print(f"{mechanism!s:>12}: final accuracy {curve[-1, 0]:.3f}, "
          f"log-loss {curve[-1, 1]:.3f}")

# %%
# Accuracy and log-loss over rounds (the plot is skipped when matplotlib is
# not installed).
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for mechanism, curve in curves.items():
        label = "no noise" if mechanism is None else repr(mechanism)
        style = "k--" if mechanism is None else "-"
        ax_acc.plot(rounds, curve[:, 0], style, label=label)
        ax_loss.plot(rounds, curve[:, 1], style, label=label)
    ax_acc.set_ylabel("test accuracy")
    ax_loss.set_ylabel("test log-loss")
    ax_loss.set_yscale("log")
    for ax in (ax_acc, ax_loss):
        ax.set_xlabel("communication round")
    ax_loss.legend(title="mechanism", loc="upper right", fontsize=8)
    fig.suptitle(f"LogisticRegression, {n_learners} learners, "
                 f"(ε, δ) = ({epsilon:g}, {delta:g})")
    fig.tight_layout()
    if plt.get_backend().lower() != "agg":
        plt.show()

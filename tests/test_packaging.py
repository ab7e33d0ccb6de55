"""The released package: one version, ``--version``, a typed wheel, a clean checkout."""

import os
import pathlib
import subprocess
import sys
import re
import zipfile

import pytest

import skfedpriv
from skfedpriv.__main__ import main

ROOT = pathlib.Path(__file__).parents[1]
pytestmark = pytest.mark.skipif(
    not (ROOT / "pyproject.toml").exists(), reason="needs a source checkout"
)


def _tree(root):
    """Every path under ``root``, bytecode caches left out."""
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*")
        if "__pycache__" not in path.parts and ".pytest_cache" not in path.parts
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from the checkout by the declared build backend."""
    assert 'build-backend = "flit_core.buildapi"' in (ROOT / "pyproject.toml").read_text()
    buildapi = pytest.importorskip("flit_core.buildapi")
    out = tmp_path_factory.mktemp("wheel")
    before = _tree(ROOT)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        name = buildapi.build_wheel(str(out))
    finally:
        os.chdir(cwd)
    return out / name, before


def test_building_the_wheel_writes_nothing_into_the_checkout(wheel):
    _, before = wheel
    assert _tree(ROOT) == before
    assert not (ROOT / "build").exists() and not list(ROOT.glob("*.egg-info"))


def test_the_wheel_carries_the_version_the_marker_and_the_script(wheel):
    path, _ = wheel
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
        scripts = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "skfedpriv/py.typed" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert f"\nVersion: {skfedpriv.__version__}\n" in metadata
    assert "skfedpriv=skfedpriv.__main__:main" in scripts.replace(" ", "")
    assert path.name.startswith(f"skfedpriv-{skfedpriv.__version__}-")


def test_version_is_a_release_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", skfedpriv.__version__)
    # the changelog has a section for it, below the one that collects what comes next
    headings = re.findall(r"^## (\S+)", (ROOT / "docs" / "changes.md").read_text(), re.M)
    assert headings[:2] == ["Unreleased", skfedpriv.__version__]


def test_version_on_the_command_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"skfedpriv {skfedpriv.__version__}"
    run = subprocess.run([sys.executable, "-m", "skfedpriv", "--version"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == f"skfedpriv {skfedpriv.__version__}"

"""The venv's pipegnn is this checkout's package from any folder, even one holding another `pipegnn/`
(the folder above a clone named pipegnn): `make setup` installs it editable in compat mode, a .pth that
puts the checkout on sys.path, so the regular package wins over a namespace package of the cwd."""
from __future__ import annotations

import subprocess

import pytest

from tests.helpers import ROOT

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


@pytest.mark.skipif(not VENV_PYTHON.exists(), reason="no .venv (make setup)")
def test_a_pipegnn_folder_in_the_cwd_does_not_shadow_the_package(tmp_path) -> None:
    (tmp_path / "pipegnn" / "results").mkdir(parents=True)  # a clone's name, or the repository's results/
    code = ("import pipegnn.results, pathlib; pipegnn.results.load; "
            "print(pathlib.Path(pipegnn.__file__).resolve().parent)")
    for args in (["-c", code], ["-m", "pipegnn.results", "--help"]):
        done = subprocess.run([str(VENV_PYTHON), *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run([str(VENV_PYTHON), "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == str(ROOT / "pipegnn")

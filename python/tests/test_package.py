"""The package as a user gets it: the README example runs, and `pip install ./python` in
a fresh virtual environment (Debian's torch, setuptools and wheel; no index) gives a
package that loads its own shipped libtirl.so."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]


def test_readme_example_runs():
    source = (PYTHON_DIR / "README.md").read_text()
    example = re.findall(r"```python\n(.*?)```", source, re.S)[0]
    assert len(example.strip().splitlines()) <= 20
    exec(compile(example, "python/README.md", "exec"), {})


def test_pip_install_offline_ships_the_library(tmp_path):
    venv = tmp_path / "venv"
    # --without-pip: the venv sees Debian's pip (python3-pip) through the system site packages,
    # which saves installing a private pip into it.
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                          capture_output=True, text=True)
    python = str(venv / "bin" / "python")
    if made.returncode != 0 or subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip(f"no venv with pip here (python3-venv, python3-pip): {made.stderr.strip()[-200:]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "TIRL_LIBRARY"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(PYTHON_DIR)], check=True, env=env,
                   cwd=tmp_path, timeout=300)
    probe = ("import tirl, torch; print(tirl.library_path); "
             "print(float(tirl.group_advantages(torch.tensor([1.0, 0.0]), group_size=2)[0]))")
    out = subprocess.run([python, "-c", probe], check=True, env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60).stdout.split()
    assert out[0].startswith(str(venv)) and out[0].endswith("tirl/lib/libtirl.so")
    assert float(out[1]) == pytest.approx(0.7071063)

"""examples/pytorch/ddp_train.py under torchrun with 2 processes: its parameters after the
GRPO steps equal a one-process run's, and it prints the per-step table."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "ddp_train.py"


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
def test_torchrun_two_processes_match_one(tmp_path):
    # --redirects/--tee 1: Debian 12's torchrun (torch 1.13 on Python 3.11) cannot parse the
    # default "0" (Python 3.11 no longer iterates a Flag's zero member); stdout is teed.
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "--redirects", "1", "--tee", "1", "--monitor_interval", "0.5", "--log_dir", str(tmp_path / "logs"),
               str(EXAMPLE), "--steps", "4", "--check"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=180,
                         env=dict(os.environ, OMP_NUM_THREADS="1", TIRL_NUM_THREADS="1"))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "equal the one-process run: yes" in output, output
    rows = [line for line in output.splitlines() if line.split(":", 1)[-1].strip()[:1].isdigit()]
    assert len(rows) >= 4, output

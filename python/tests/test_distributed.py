"""tirl.distributed for real: 2 and 4 gloo processes under DistributedDataParallel, an
uneven split (different sequence and token counts per rank, a fully masked sequence on
rank 1), every aggregation with KL, GSPO and weights: the loss averaged over ranks and the
DDP-averaged gradients equal the one-process run (rtol 1e-5), and group advantages with
groups spread over ranks equal the one-process ones."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import dist_worker
import tirl.distributed

WORKER = Path(dist_worker.__file__)
pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


@pytest.fixture(scope="module")
def one_process():
    return dist_worker.one_process()


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_gradients_equal_one_process(world, tmp_path, one_process):
    init_file, out_file = tmp_path / "init", tmp_path / "out.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1", TIRL_NUM_THREADS="1")
    workers = [subprocess.Popen([sys.executable, str(WORKER), str(rank), str(world), str(init_file), str(out_file)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for rank in range(world)]
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    for rank, (worker, output) in enumerate(zip(workers, outputs)):
        assert worker.returncode == 0, f"rank {rank}:\n{output}"
    saved = torch.load(out_file)
    expected, expected_advantages = one_process
    torch.testing.assert_close(saved["advantages"], expected_advantages, rtol=1e-6, atol=1e-6)
    for config, (loss, weight, bias), (loss1, weight1, bias1) in zip(dist_worker.CONFIGS, saved["results"], expected):
        message = f"world {world}, {config}"
        assert abs(float(loss1)) > 0 or config["aggregation"] == "token-sum", message
        torch.testing.assert_close(loss, loss1, rtol=1e-5, atol=1e-7, msg=message)
        torch.testing.assert_close(weight, weight1, rtol=1e-5, atol=1e-7, msg=message)
        torch.testing.assert_close(bias, bias1, rtol=1e-5, atol=1e-7, msg=message)
        assert weight1.abs().max() > 0, message


def test_normalizers_need_an_initialised_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialised")
    with pytest.raises(RuntimeError, match="init_process_group"):
        tirl.distributed.global_normalizers(torch.ones(2, 3, dtype=torch.bool))


def test_local_counts_both_layouts():
    mask = torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1]], dtype=torch.bool)
    assert tirl.distributed.local_counts(mask) == (5, 2, 3)
    flat = torch.tensor([1, 0, 0, 0, 1, 1, 0], dtype=torch.bool)
    assert tirl.distributed.local_counts(flat, torch.tensor([0, 2, 3, 7])) == (3, 2, 4)

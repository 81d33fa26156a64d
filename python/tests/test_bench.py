"""The benchmark's smoke run: every case and the overhead probe run and report numbers."""

import torch

from tirl import bench


def test_bench_runs_every_case():
    rows = bench.run("tiny", torch.device("cpu"), min_time=0.001)
    assert len(rows) == 4 and all(row["tirl_ms"] > 0 and row["eager_ms"] > 0 for row in rows)
    overhead = bench.binding_overhead(torch.device("cpu"), min_time=0.001)
    assert overhead["ppo_loss bare ctypes call"] > 0

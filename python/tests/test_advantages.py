"""tirl.advantages (tirl_advantages): the GRPO estimator equals group_advantages broadcast
over the response mask, in both layouts; the other estimators are checked against verl's
formulas in test_verl.py. Skipped with a library that predates the op."""

import pytest
import torch

import tirl
from tirl import _abi

pytestmark = pytest.mark.skipif(not hasattr(_abi.lib, "tirl_advantages"),
                                reason=f"{_abi.library_path} has no tirl_advantages")


def test_grpo_equals_group_advantages_both_layouts():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    rewards = torch.tensor([1.0, 0.0, 2.0, 3.5])
    ids = torch.tensor([5, 5, 9, 9])
    padded, returns = tirl.advantages(mask, rewards=rewards, group_ids=ids)
    expected = tirl.group_advantages(rewards, group_ids=ids)[:, None] * mask
    assert torch.equal(padded, expected) and torch.equal(returns, expected)
    packed, _ = tirl.advantages(mask.reshape(-1), rewards=rewards, group_size=2,
                                cu_seqlens=torch.tensor([0, 3, 6, 9, 12]))
    assert torch.equal(packed.view(4, 3), expected)


def test_errors_name_the_argument():
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="estimator"):
        tirl.advantages(mask, estimator="ppo", rewards=torch.zeros(2), group_size=2)
    with pytest.raises(ValueError, match="values"):
        tirl.advantages(mask, estimator="gae", token_rewards=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="rewards"):
        tirl.advantages(mask, rewards=torch.zeros(3), group_size=1)

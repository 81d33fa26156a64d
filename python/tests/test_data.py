"""tirl.data: trajectories written by the TypeScript SDK read back in Python token for
token (against the SDK's own packTrajectories, feedbackMask and groupAdvantages), both
layouts, streaming batches, and errors naming the line."""

import io
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import tirl
import tirl.data

ROOT = Path(__file__).resolve().parents[2]
needs_node = pytest.mark.skipif(
    shutil.which("node") is None or not (ROOT / "dist" / "test" / "tokenizers.js").is_file(),
    reason="needs node and this checkout's dist/ (npm run build)")


@pytest.fixture(scope="module")
def from_typescript(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ts")
    jsonl, expected = folder / "trajectories.jsonl", folder / "expected.json"
    subprocess.run(["node", str(Path(__file__).with_name("trajectories_from_ts.mjs")), str(jsonl), str(expected)],
                   check=True, cwd=ROOT, timeout=60)
    return jsonl, json.loads(expected.read_text())


@needs_node
def test_round_trip_token_for_token(from_typescript):
    jsonl, expected = from_typescript
    batch = tirl.data.collate(list(tirl.data.read_sequences(jsonl)), layout="packed")
    assert batch.ids == expected["ids"]
    assert batch.input_ids.tolist() == expected["tokens"]
    assert batch.roles.tolist() == expected["roles"]
    assert batch.cu_seqlens.tolist() == expected["seqOffsets"]
    assert torch.equal(batch.old_logp, torch.tensor(expected["behaviourLogprobs"], dtype=torch.float32))
    assert batch.loss_mask.to(torch.uint8).tolist() == expected["mask"]
    assert batch.rewards.tolist() == expected["rewards"]
    assert batch.group_ids.tolist() == expected["groupIds"]
    assert batch.policy_versions.tolist() == expected["policyVersions"]
    assert batch.exact.to(torch.uint8).tolist() == expected["exact"]
    assert torch.equal(batch.advantages, torch.tensor(expected["advantages"], dtype=torch.float32))


@needs_node
def test_padded_layout_and_streaming(from_typescript):
    jsonl, expected = from_typescript
    offsets = expected["seqOffsets"]
    batches = list(tirl.data.batches(jsonl, batch_size=2, layout="padded", pad_token_id=7, advantages=None))
    assert [len(b.ids) for b in batches] == [2, 2, 1]
    rows = [row for b in batches for row in zip(b.input_ids.tolist(), b.roles.tolist(), b.attention_mask.tolist())]
    for i, (ids, roles, attention) in enumerate(rows):
        n = offsets[i + 1] - offsets[i]
        assert ids[:n] == expected["tokens"][offsets[i]:offsets[i + 1]] and set(ids[n:]) <= {7}
        assert roles[:n] == expected["roles"][offsets[i]:offsets[i + 1]] and set(roles[n:]) <= {3}
        assert attention == [True] * n + [False] * (len(ids) - n)
    first = batches[0]
    logp = first.old_logp.clone()
    loss, stats = tirl.ppo_loss(logp, first.old_logp, torch.ones_like(logp), first.loss_mask)
    assert stats.masked_tokens == int(first.action_tokens.sum())


def test_malformed_lines_name_the_line_and_field():
    good = {"id": "a", "prompt": "p", "promptTokenIds": [1, 2], "turns": [{"action": {"text": "x", "tokenIds": [3]}}],
            "reward": 1.0, "someFutureField": {"x": 1}}
    lines = [json.dumps(good), "", json.dumps({**good, "turns": [{"action": {"text": "x", "tokenIds": [3, -1]}}]})]
    reader = tirl.data.read_sequences(io.StringIO("\n".join(lines) + "\n"))
    assert next(reader).token_ids == [1, 2, 3]
    with pytest.raises(ValueError, match=r"line 3: .*turns\[0\]\.action\.tokenIds\[1\]"):
        next(reader)
    with pytest.raises(ValueError, match="line 1: invalid JSON"):
        list(tirl.data.read_sequences(io.StringIO("{not json\n")))
    without_ids = {**good, "promptTokenIds": None}
    del without_ids["promptTokenIds"]
    with pytest.raises(ValueError, match="line 1: .*promptTokenIds"):
        list(tirl.data.read_sequences(io.StringIO(json.dumps(without_ids))))
    bad_logprobs = {**good, "turns": [{"action": {"text": "x", "tokenIds": [3], "logprobs": [0.1, 0.2]}}]}
    with pytest.raises(ValueError, match=r"line 1: .*logprobs"):
        list(tirl.data.read_sequences(io.StringIO(json.dumps(bad_logprobs))))
    no_reward = {k: v for k, v in good.items() if k != "reward"}
    sequences = list(tirl.data.read_sequences(io.StringIO(json.dumps(no_reward))))
    assert math.isnan(sequences[0].reward)
    with pytest.raises(ValueError, match="line 1: expected a reward"):
        tirl.data.collate(sequences)
    assert tirl.data.collate(sequences, advantages=None).advantages is None


@pytest.mark.skipif(not hasattr(tirl._abi.lib, "tirl_advantages"), reason="the library has no tirl_advantages")
def test_other_estimators_through_tirl_advantages():
    records = [{"id": str(i), "prompt": "p", "promptTokenIds": [1], "groupId": "g" if i < 3 else "h",
                "turns": [{"action": {"text": "x", "tokenIds": [2, 3]}}], "reward": float(i)} for i in range(5)]
    sequences = list(tirl.data.read_sequences(io.StringIO("\n".join(json.dumps(r) for r in records))))
    batch = tirl.data.collate(sequences, advantages="rloo")
    expected, _ = tirl.advantages(batch.loss_mask, estimator="rloo", rewards=batch.rewards, group_ids=batch.group_ids)
    assert batch.advantages is None and torch.equal(batch.token_advantages, expected)
    assert batch.token_advantages[0, 1].item() == pytest.approx(3 / 2 * (0 - 1))
    with pytest.raises(ValueError, match="advantages"):
        tirl.data.collate(sequences, advantages="ppo")

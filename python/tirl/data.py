"""Trajectory JSONL from the TypeScript SDK (``writeTrajectories``) into trainer tensors.

The record format is ``docs/trajectories.md``: a training sequence is ``promptTokenIds``
(role prompt), then per turn the action's ``tokenIds`` (role action, with the rollout
engine's ``logprobs``) and the turn's ``feedbackTokenIds`` (role feedback). Fields this
reader does not know are ignored, so records from newer writers still read.

    for batch in tirl.data.batches("rollouts.jsonl", batch_size=64, layout="padded"):
        logp = tirl.token_logprobs(model(batch.input_ids).logits[:, :-1], batch.input_ids[:, 1:])
        ...  # batch.loss_mask, batch.old_logp, batch.token_advantages

Files are read line by line (streaming: a file larger than memory is fine, one batch at a
time is held). A malformed line is a ``ValueError`` naming the line number and the field.
Records must carry their token ids (``promptTokenIds`` and each action's ``tokenIds``);
records with text only must be rendered with the SDK first (``renderTrajectory``): there
is no tokenizer here. A last turn's response without ``feedbackTokenIds`` is left out (no
trained token depends on it; the SDK would render it from its text).
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import dataclass, field
from typing import IO, Any, Dict, Iterator, List, Optional, Sequence as SequenceType, Union

import torch

from .ops.feedback_mask import ACTION, FEEDBACK, PADDING, PROMPT, feedback_mask
from .ops.advantages import advantages as estimate
from .ops.group_advantages import group_advantages

_GROUP_ESTIMATORS = ("rloo", "grpo_passk", "reinforce_plus_plus_baseline", "opo", "gpg")

Source = Union[str, "os.PathLike[str]", IO[str]]


@dataclass
class TrajectorySequence:
    """One trajectory as a token sequence."""

    id: str
    token_ids: List[int]
    roles: List[int]
    """0 prompt, 1 action, 2 feedback per token."""
    logprobs: List[float]
    """The rollout engine's log-prob on action tokens, 0 elsewhere (and where it gave none)."""
    reward: float
    """Outcome reward; NaN when the record has none."""
    group_id: Optional[str]
    policy_version: int
    """Oldest policyVersion of its actions, else the trajectory's, else -1."""
    exact: bool
    """Every action's ids came from the engine (tokenSource not 'text') and every turn
    followed by another has its feedbackTokenIds."""
    truncated: bool
    line_number: int


@dataclass
class TrajectoryBatch:
    """Trainer tensors of B sequences, padded ``[B, T]`` or packed ``[N]`` (with ``cu_seqlens``)."""

    ids: List[str]
    input_ids: torch.Tensor
    """int64 token ids (padding: ``pad_token_id``)."""
    roles: torch.Tensor
    """uint8 roles (3 = padding)."""
    attention_mask: torch.Tensor
    """bool, False on padding."""
    loss_mask: torch.Tensor
    """bool: action tokens of kept sequences (``tirl.feedback_mask``)."""
    old_logp: torch.Tensor
    """float32 rollout log-probs on action tokens, 0 elsewhere."""
    rewards: torch.Tensor
    """float32 ``[B]``."""
    group_ids: torch.Tensor
    """int32 ``[B]``: dense group index (records without groupId are groups of one)."""
    advantages: Optional[torch.Tensor]
    """float32 ``[B]`` (``tirl.group_advantages``), or None when not asked."""
    token_advantages: Optional[torch.Tensor]
    """``advantages`` broadcast to the tokens (shape of ``input_ids``)."""
    action_tokens: torch.Tensor
    """int32 ``[B]`` masked token counts."""
    policy_versions: torch.Tensor
    """int64 ``[B]``."""
    exact: torch.Tensor
    """bool ``[B]``."""
    cu_seqlens: Optional[torch.Tensor]
    """int32 ``[B + 1]`` for the packed layout, else None."""
    group_keys: List[Optional[str]] = field(default_factory=list)


def _fail(line: int, name: str, expected: str, value: Any) -> ValueError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ValueError(f"tirl.data: line {line}: expected {expected} for {name} but received {shown}")


def _token_ids(line: int, name: str, value: Any) -> List[int]:
    if not isinstance(value, list):
        raise _fail(line, name, "an array of token ids", value)
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise _fail(line, f"{name}[{i}]", "a non-negative integer", item)
    return value


def _optional_version(line: int, name: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(line, name, "an integer >= 0", value)
    return value


def parse_record(record: Any, line: int = 0) -> TrajectorySequence:
    """One parsed JSON record (a dict) as a :class:`TrajectorySequence`."""
    if not isinstance(record, dict):
        raise _fail(line, "trajectory", "a JSON object", record)
    trajectory_id = record.get("id")
    if not isinstance(trajectory_id, str):
        raise _fail(line, "id", "a string", trajectory_id)
    turns = record.get("turns")
    if not isinstance(turns, list):
        raise _fail(line, "turns", "an array", turns)
    if "promptTokenIds" not in record:
        raise _fail(line, "promptTokenIds", "the prompt's token ids (render text-only records with the SDK's "
                    "renderTrajectory first)", None)
    ids = list(_token_ids(line, "promptTokenIds", record["promptTokenIds"]))
    roles = [PROMPT] * len(ids)
    logprobs = [0.0] * len(ids)
    exact = True
    versions: List[int] = []
    for t, turn in enumerate(turns):
        name = f"turns[{t}]"
        if not isinstance(turn, dict) or not isinstance(turn.get("action"), dict):
            raise _fail(line, f"{name}.action", "an object", turn.get("action") if isinstance(turn, dict) else turn)
        action = turn["action"]
        if "tokenIds" not in action:
            raise _fail(line, f"{name}.action.tokenIds", "the action's token ids", None)
        action_ids = _token_ids(line, f"{name}.action.tokenIds", action["tokenIds"])
        action_logprobs = action.get("logprobs")
        if action_logprobs is None:
            action_logprobs = [0.0] * len(action_ids)
        elif not isinstance(action_logprobs, list) or len(action_logprobs) != len(action_ids):
            raise _fail(line, f"{name}.action.logprobs", f"{len(action_ids)} numbers (one per token id)",
                        action_logprobs)
        for i, value in enumerate(action_logprobs):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _fail(line, f"{name}.action.logprobs[{i}]", "a number", value)
        if action.get("tokenSource", "tokens") not in ("tokens", "text"):
            raise _fail(line, f"{name}.action.tokenSource", "'tokens' or 'text'", action.get("tokenSource"))
        exact = exact and action.get("tokenSource", "tokens") == "tokens"
        version = _optional_version(line, f"{name}.action.policyVersion", action.get("policyVersion"))
        if version is not None:
            versions.append(version)
        ids += action_ids
        roles += [ACTION] * len(action_ids)
        logprobs += [float(v) for v in action_logprobs]
        feedback = turn.get("feedbackTokenIds")
        if feedback is None:
            exact = exact and t == len(turns) - 1
            continue
        feedback = _token_ids(line, f"{name}.feedbackTokenIds", feedback)
        ids += feedback
        roles += [FEEDBACK] * len(feedback)
        logprobs += [0.0] * len(feedback)
    reward = record.get("reward", math.nan)
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise _fail(line, "reward", "a number", reward)
    group_id = record.get("groupId")
    if group_id is not None and not isinstance(group_id, str):
        raise _fail(line, "groupId", "a string", group_id)
    trajectory_version = _optional_version(line, "policyVersion", record.get("policyVersion"))
    policy_version = min(versions) if versions else (trajectory_version if trajectory_version is not None else -1)
    return TrajectorySequence(id=trajectory_id, token_ids=ids, roles=roles, logprobs=logprobs, reward=float(reward),
                              group_id=group_id, policy_version=policy_version, exact=exact,
                              truncated=bool(record.get("truncated", False)), line_number=line)


def read_sequences(source: Source) -> Iterator[TrajectorySequence]:
    """The sequences of a JSONL file (a path or an open text file), one line at a time.
    Blank lines are skipped; a malformed line raises ``ValueError`` naming its number."""
    handle: IO[str]
    close = False
    if isinstance(source, (str, os.PathLike)):
        handle = open(source, encoding="utf-8", errors="replace")
        close = True
    elif isinstance(source, io.TextIOBase) or hasattr(source, "readline"):
        handle = source  # type: ignore[assignment]
    else:
        raise TypeError(f"tirl: expected a path or a text file for source but received {type(source).__name__}")
    try:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"tirl.data: line {number}: invalid JSON ({error.msg} at column {error.colno})") \
                    from error
            yield parse_record(record, number)
    finally:
        if close:
            handle.close()


def collate(sequences: SequenceType[TrajectorySequence], *, layout: str = "padded", pad_token_id: int = 0,
            pad_to: Optional[int] = None, keep: Optional[torch.Tensor] = None,
            advantages: Optional[str] = "grpo", epsilon: float = 1e-6,
            device: Union[str, torch.device] = "cpu") -> TrajectoryBatch:
    """Packs sequences into a :class:`TrajectoryBatch`.

    Args:
        layout: 'padded' (``[B, T]``, T = the longest, or ``pad_to``) or 'packed' (``[N]`` + ``cu_seqlens``).
        pad_token_id: id written at padding positions.
        keep: bool ``[B]``: sequences whose action tokens are trained on (default all).
        advantages: 'grpo' (scaled by the group std), 'dr_grpo' (not scaled), None, or (where
            the library has tirl_advantages) another verl estimator that needs only the
            rewards: 'rloo', 'grpo_passk', 'reinforce_plus_plus_baseline', 'opo', 'gpg'
            (over the groups) or 'reinforce_plus_plus'; these give ``token_advantages``
            only (``advantages`` is None).
        device: where the tensors go (the kernels run there).
    """
    if layout not in ("padded", "packed"):
        raise ValueError(f"tirl: expected 'padded' or 'packed' for layout but received {layout!r}")
    known = ("grpo", "dr_grpo") + _GROUP_ESTIMATORS + ("reinforce_plus_plus",)
    if advantages is not None and advantages not in known:
        raise ValueError(f"tirl: expected None or one of {', '.join(map(repr, known))} for advantages "
                         f"but received {advantages!r}")
    count = len(sequences)
    lengths = [len(s.token_ids) for s in sequences]
    if layout == "padded":
        width = max(lengths, default=0) if pad_to is None else pad_to
        if any(length > width for length in lengths):
            raise ValueError(f"tirl: expected sequences of at most pad_to = {pad_to} tokens but the longest has "
                             f"{max(lengths)}")
        input_ids = torch.full((count, width), pad_token_id, dtype=torch.int64)
        roles = torch.full((count, width), PADDING, dtype=torch.uint8)
        old_logp = torch.zeros((count, width), dtype=torch.float32)
        for i, s in enumerate(sequences):
            n = lengths[i]
            input_ids[i, :n] = torch.tensor(s.token_ids, dtype=torch.int64)
            roles[i, :n] = torch.tensor(s.roles, dtype=torch.uint8)
            old_logp[i, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
        cu_seqlens = None
    else:
        input_ids = torch.tensor([t for s in sequences for t in s.token_ids], dtype=torch.int64)
        roles = torch.tensor([r for s in sequences for r in s.roles], dtype=torch.uint8)
        old_logp = torch.tensor([p for s in sequences for p in s.logprobs], dtype=torch.float32)
        offsets = [0]
        for length in lengths:
            offsets.append(offsets[-1] + length)
        cu_seqlens = torch.tensor(offsets, dtype=torch.int32)
    input_ids, roles, old_logp = input_ids.to(device), roles.to(device), old_logp.to(device)
    if cu_seqlens is not None:
        cu_seqlens = cu_seqlens.to(device)
    keep_tensor = None if keep is None else keep.to(device)
    loss_mask, action_tokens = feedback_mask(roles, cu_seqlens=cu_seqlens, keep=keep_tensor)

    dense: Dict[Any, int] = {}
    group_keys: List[Optional[str]] = []
    group_list = []
    for i, s in enumerate(sequences):
        key = s.group_id if s.group_id is not None else ("", i)  # no groupId: a group of its own
        if key not in dense:
            dense[key] = len(dense)
            group_keys.append(s.group_id)
        group_list.append(dense[key])
    group_ids = torch.tensor(group_list, dtype=torch.int32, device=device)
    rewards = torch.tensor([s.reward for s in sequences], dtype=torch.float32, device=device)
    sequence_advantages = token_advantages = None
    if advantages is not None:
        missing = [s for s in sequences if math.isnan(s.reward)]
        if missing:
            raise ValueError(f"tirl.data: line {missing[0].line_number}: expected a reward for trajectory "
                             f"{missing[0].id!r} (advantages={advantages!r} needs one per sequence)")
    if advantages in ("grpo", "dr_grpo"):
        sequence_advantages = group_advantages(rewards, group_ids=group_ids, scale_by_std=advantages == "grpo",
                                               epsilon=epsilon)
        if layout == "padded":
            token_advantages = sequence_advantages[:, None].expand_as(old_logp).contiguous()
        else:
            token_advantages = torch.repeat_interleave(sequence_advantages,
                                                       torch.tensor(lengths, device=device))
    elif advantages is not None:
        groups = {"group_ids": group_ids} if advantages in _GROUP_ESTIMATORS else {}
        token_advantages, _ = estimate(loss_mask, estimator=advantages, rewards=rewards, cu_seqlens=cu_seqlens,
                                       **groups)
    return TrajectoryBatch(
        ids=[s.id for s in sequences], input_ids=input_ids, roles=roles, attention_mask=roles != PADDING,
        loss_mask=loss_mask, old_logp=old_logp, rewards=rewards, group_ids=group_ids,
        advantages=sequence_advantages, token_advantages=token_advantages, action_tokens=action_tokens,
        policy_versions=torch.tensor([s.policy_version for s in sequences], dtype=torch.int64, device=device),
        exact=torch.tensor([s.exact for s in sequences], dtype=torch.bool, device=device), cu_seqlens=cu_seqlens,
        group_keys=group_keys)


def batches(source: Source, batch_size: int, **options: Any) -> Iterator[TrajectoryBatch]:
    """Streams a JSONL file as batches of ``batch_size`` sequences (the last may be
    smaller); ``options`` go to :func:`collate`. Groups are normalised within a batch:
    write a group's episodes next to each other and choose a batch size holding whole groups."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"tirl: expected an integer >= 1 for batch_size but received {batch_size!r}")
    pending: List[TrajectorySequence] = []
    for sequence in read_sequences(source):
        pending.append(sequence)
        if len(pending) == batch_size:
            yield collate(pending, **options)
            pending = []
    if pending:
        yield collate(pending, **options)

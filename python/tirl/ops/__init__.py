"""One module per op of the C ABI, named as in native/src (``ppo_loss.py`` ↔
``native/src/cpu/ppo_loss.cc``): each holds its ``torch.autograd.Function`` and the plain
function in front of it."""

from .advantages import advantages
from .dpo_loss import DpoLossFunction, DpoStats, dpo_loss
from .feedback_mask import ACTION, FEEDBACK, PADDING, PROMPT, feedback_mask
from .group_advantages import group_advantages
from .ppo_loss import PpoLossFunction, PpoStats, ppo_loss
from .rollout_correction import rollout_correction
from .sequence_logprobs import SequenceLogprobsFunction, sequence_logprobs
from .token_logprobs import TokenLogprobsFunction, token_logprobs

__all__ = [
    "ACTION", "FEEDBACK", "PADDING", "PROMPT",
    "advantages",
    "DpoLossFunction", "DpoStats", "dpo_loss",
    "feedback_mask",
    "group_advantages",
    "PpoLossFunction", "PpoStats", "ppo_loss",
    "rollout_correction",
    "SequenceLogprobsFunction", "sequence_logprobs",
    "TokenLogprobsFunction", "token_logprobs",
]

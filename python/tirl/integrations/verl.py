"""verl drop-ins: functions with the names, arguments and return values of
``verl/trainer/ppo/core_algos.py``, computed by tirl's fused kernels.

Conventions read from verl-project/verl at commit 1dda039b9c6311889a9c9a26040677e1254814f9
(2026-08-22): ``compute_policy_loss_vanilla`` (dual clip with ``clip_ratio_c``, default 3),
``compute_policy_loss_gspo`` (always aggregated with seq-mean-token-mean), ``_gpg``,
``_sapo`` (seq-mean-token-mean, ``tau_pos``/``tau_neg``), ``_cispo``, ``_dro``
(``policy_loss.dro_beta``) where the library has ``tirl_policy_loss``, ``agg_loss``'s
five modes and ``config.global_batch_info`` (``dp_size``, ``batch_num_tokens``,
``global_batch_size``, ``loss_scale_factor``), ``compute_grpo_outcome_advantage``,
``compute_rloo_outcome_advantage``, ``compute_reinforce_plus_plus_outcome_advantage`` and
``compute_gae_advantage_return`` (where the library has ``tirl_advantages``), the two
registries, and from ``verl/trainer/ppo/rollout_corr_helper.py``
``compute_rollout_correction_and_rejection_mask`` (verl's threshold strings: "lower_upper"
for IcePop and k1 bounds) and ``compute_offpolicy_metrics``. The config is read by ``.get``
or attribute (verl's dataclass configs, an OmegaConf node or a plain dict), never by type.

    from tirl.integrations import verl as tirl_verl
    tirl_verl.register()            # adds tirl_<mode> names to verl's registries
    # actor.policy_loss.loss_mode=tirl_vanilla, algorithm.adv_estimator=tirl_grpo

Differences from verl, by construction of the kernels: the per-token math runs in float32
with float64 sums (verl: the input dtype); ``seq-mean-token-mean`` divides by the
masked token count where verl adds 1e-8 to it; GSPO's ``actor/ppo_kl`` is the masked mean
of the clamped log-ratio (|log-ratio| <= 20). verl's ``kl_penalty`` returns a per-token
matrix that verl then aggregates; the kernels fuse the KL into the loss instead, so this
module offers :func:`kl_loss` (the aggregated ``kl_penalty``) rather than the matrix.
"""

from __future__ import annotations

import types
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from .. import _abi
from ..ops.advantages import advantages as tirl_advantages
from ..ops.group_advantages import group_advantages
from ..ops.ppo_loss import ppo_loss
from ..ops.rollout_correction import rollout_correction
from ._config import read

VERL_COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"
KL_PENALTIES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def _normalizers(config: Any) -> Dict[str, float]:
    """verl's ``config.global_batch_info`` as tirl.ppo_loss keyword arguments."""
    info = read(config, "global_batch_info", {}) or {}
    names = {"dp_size": "dp_size", "batch_num_tokens": "token_normalizer",
             "global_batch_size": "seq_normalizer", "loss_scale_factor": "horizon"}
    options: Dict[str, float] = {}
    for verl_name, tirl_name in names.items():
        value = read(info, verl_name)
        if value is not None:
            options[tirl_name] = float(value.item() if isinstance(value, torch.Tensor) else value)
    return options


def _clip_range(config: Any) -> Tuple[float, float]:
    clip_ratio = read(config, "clip_ratio", 0.2)
    return float(read(config, "clip_ratio_low", clip_ratio)), float(read(config, "clip_ratio_high", clip_ratio))


def _metrics(stats, lower: bool = True) -> Dict[str, float]:
    return {"actor/pg_clipfrac": stats.clip_fraction, "actor/ppo_kl": stats.approx_kl,
            "actor/pg_clipfrac_lower": stats.clip_fraction_lower if lower else 0.0}


def _weights(rollout_is_weights: Optional[torch.Tensor], like: torch.Tensor) -> Optional[torch.Tensor]:
    if rollout_is_weights is None:
        return None
    return rollout_is_weights.to(torch.float32).expand_as(like).contiguous()


def compute_policy_loss_vanilla(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                config: Any = None, rollout_is_weights: Optional[torch.Tensor] = None,
                                ) -> Tuple[torch.Tensor, Dict[str, float]]:
    """verl's PPO clipped objective with dual clip (``clip_ratio_c``, default 3.0), rollout
    correction weights and ``agg_loss`` with ``config.global_batch_info``: returns
    ``(pg_loss, metrics)`` with ``actor/pg_clipfrac``, ``actor/ppo_kl`` and
    ``actor/pg_clipfrac_lower``."""
    if config is None:
        raise TypeError("tirl: expected an actor config for config but received None (verl asserts it too)")
    clip_low, clip_high = _clip_range(config)
    clip_ratio_c = float(read(config, "clip_ratio_c", 3.0))
    if not clip_ratio_c > 1.0:
        raise ValueError(f"tirl: expected clip_ratio_c > 1.0 for config.clip_ratio_c but received {clip_ratio_c}")
    loss, stats = ppo_loss(log_prob, old_log_prob.to(torch.float32), advantages.to(torch.float32), response_mask,
                           clip_low=clip_low, clip_high=clip_high, dual_clip=clip_ratio_c,
                           aggregation=loss_agg_mode, weights=_weights(rollout_is_weights, log_prob),
                           **_normalizers(config))
    return loss, _metrics(stats)


def compute_policy_loss_gspo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-mean",
                             config: Any = None, rollout_is_weights: Optional[torch.Tensor] = None,
                             ) -> Tuple[torch.Tensor, Dict[str, float]]:
    """verl's GSPO: the sequence-level ratio, clipped, always aggregated with
    seq-mean-token-mean (verl ignores ``loss_agg_mode`` here too)."""
    if config is None:
        raise TypeError("tirl: expected an actor config for config but received None (verl asserts it too)")
    clip_low, clip_high = _clip_range(config)
    loss, stats = ppo_loss(log_prob, old_log_prob.to(torch.float32), advantages.to(torch.float32), response_mask,
                           clip_low=clip_low, clip_high=clip_high, aggregation="seq-mean-token-mean",
                           ratio_level="sequence", weights=_weights(rollout_is_weights, log_prob),
                           **_normalizers(config))
    return loss, _metrics(stats, lower=False)


def kl_loss(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, response_mask: torch.Tensor,
            loss_agg_mode: str = "token-mean", kl_penalty: str = "low_var_kl",
            config: Any = None) -> torch.Tensor:
    """``agg_loss(kl_penalty(log_prob, ref_log_prob, kl_penalty), response_mask,
    loss_agg_mode, **config.global_batch_info)`` in one kernel call (verl's actor's
    ``kl_loss``, before ``kl_loss_coef``). ``kl_penalty``: 'kl'/'k1', 'abs', 'mse'/'k2',
    'low_var_kl'/'k3' (the straight-through '+' forms are not supported)."""
    if kl_penalty not in KL_PENALTIES:
        raise ValueError(f"tirl: expected one of {', '.join(map(repr, KL_PENALTIES))} for kl_penalty "
                         f"but received {kl_penalty!r}")
    zeros = torch.zeros_like(log_prob, dtype=torch.float32)
    loss, _ = ppo_loss(log_prob, log_prob.detach(), zeros, response_mask, aggregation=loss_agg_mode,
                       ref_logp=ref_log_prob.to(torch.float32), kl_coef=1.0,
                       kl_estimator=KL_PENALTIES[kl_penalty], **_normalizers(config))
    return loss


def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any,
                                   epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True,
                                   config: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO outcome advantage: the sequence score is the sum of its token rewards,
    normalised within the groups of ``index`` (any hashable ids, e.g. uid strings),
    broadcast over ``response_mask``; returns ``(advantages, returns)`` (the same tensor)."""
    scores = token_level_rewards.sum(dim=-1).to(torch.float32)
    dense: Dict[Any, int] = {}
    ids = [dense.setdefault(key.item() if hasattr(key, "item") else key, len(dense)) for key in list(index)]
    group_ids = torch.tensor(ids, dtype=torch.int32, device=scores.device)
    advantages = group_advantages(scores.contiguous(), group_ids=group_ids,
                                  scale_by_std=bool(norm_adv_by_std_in_grpo), epsilon=float(epsilon))
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


def _is_threshold(spec: Any) -> Tuple[float, Optional[float]]:
    """verl's rollout_is_threshold: a number (TIS upper bound) or "lower_upper" (IcePop)."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise TypeError(f"tirl: expected a number or a 'lower_upper' string for rollout_is_threshold "
                        f"but received {spec!r}")
    if isinstance(spec, str) and "_" in spec:
        lower, upper = spec.strip().split("_", 1)
        return float(upper), float(lower)
    return float(spec), None


def _rs_thresholds(options: list, spec: Any) -> Tuple[list, list]:
    """verl's rollout_rs_threshold: one spec shared by every option or one per option (comma
    separated); a k1 option takes "lower_upper" or an upper bound (lower 1/upper), the
    others an upper bound. Returns per-option upper and lower (0 = none) bounds."""
    if spec is None:
        raise ValueError("tirl: rollout_rs_threshold must be provided for rejection sampling (as verl requires)")
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise TypeError(f"tirl: expected a number or a string for rollout_rs_threshold but received {spec!r}")
    specs = [str(spec)] if not isinstance(spec, str) else [part.strip() for part in spec.split(",") if part.strip()]
    if len(specs) not in (1, len(options)):
        raise ValueError(f"tirl: expected one rollout_rs_threshold or {len(options)} (one per rollout_rs option) "
                         f"but received {spec!r}")
    specs = specs * len(options) if len(specs) == 1 else specs
    upper, lower = [], []
    for option, part in zip(options, specs):
        if "_" in part:
            if not option.endswith("k1"):
                raise ValueError(f"tirl: rollout_rs_threshold for option {option!r} must be a single upper bound "
                                 f"but received {part!r}")
            low, high = part.split("_", 1)
            upper.append(float(high))
            lower.append(float(low))
        else:
            upper.append(float(part))
            lower.append(0.0)  # k1: the kernel's default lower bound is 1 / upper, as verl's
    return upper, lower


def compute_rollout_correction_and_rejection_mask(
        old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor,
        rollout_is: Optional[str] = None, rollout_is_threshold: Any = 2.0, rollout_is_batch_normalize: bool = False,
        rollout_rs: Optional[str] = None, rollout_rs_threshold: Any = None) -> Tuple[Any, torch.Tensor, Dict[str, float]]:
    """verl's rollout_corr_helper.compute_rollout_correction_and_rejection_mask on tirl's
    fused kernel: returns ``(weights, modified_response_mask, metrics)`` with metrics under
    ``rollout_corr/`` names. ``weights`` is None without IS weights, else verl's DataProto
    holding ``rollout_is_weights`` when verl is importable, or an object with the same
    ``.batch["rollout_is_weights"]``."""
    if not bool(response_mask.any()):
        raise ValueError("tirl: response_mask must contain at least one valid token (1), as verl requires")
    level = "none" if rollout_is is None or rollout_is_threshold is None else rollout_is
    options: Dict[str, Any] = {"rollout_is": level}
    if level != "none":
        upper, lower = _is_threshold(rollout_is_threshold)
        options.update(rollout_is_threshold=upper, rollout_is_threshold_lower=lower,
                       rollout_is_batch_normalize=bool(rollout_is_batch_normalize))
    if rollout_rs is not None:
        names = [part.strip() for part in rollout_rs.split(",") if part.strip()]
        upper_rs, lower_rs = _rs_thresholds(names, rollout_rs_threshold)
        options.update(rollout_rs=names, rollout_rs_threshold=upper_rs)
        if any(lower_rs):
            options["rollout_rs_threshold_lower"] = lower_rs
    weights, mask, metrics = rollout_correction(old_log_prob.to(torch.float32), rollout_log_prob.to(torch.float32),
                                                response_mask, **options)
    prefixed = {f"rollout_corr/{name}": value for name, value in metrics.items()
                if name not in ("non_finite", "masked_tokens")}
    proto = None
    if level != "none":
        try:
            from verl import DataProto  # type: ignore[import-not-found]
            proto = DataProto.from_dict(tensors={"rollout_is_weights": weights})
        except ImportError:
            proto = types.SimpleNamespace(batch={"rollout_is_weights": weights})
    return proto, mask.to(response_mask.dtype), prefixed


_OFF_POLICY = ("training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl", "log_ppl_diff",
               "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq")


def compute_offpolicy_metrics(old_log_prob: torch.Tensor, rollout_log_prob: Optional[torch.Tensor],
                              response_mask: torch.Tensor) -> Dict[str, float]:
    """verl's off-policy diagnostics (KL, perplexities, chi-squared) between the trainer's
    and the rollout engine's log-probs; without rollout log-probs, the training perplexity only."""
    logp = old_log_prob.to(torch.float32)
    rollout = logp if rollout_log_prob is None else rollout_log_prob.to(torch.float32)
    _, _, metrics = rollout_correction(logp, rollout, response_mask, rollout_is="none")
    names = _OFF_POLICY[:2] if rollout_log_prob is None else _OFF_POLICY
    return {name: metrics[name] for name in names}



_CLIP_METRICS = (("actor/pg_clipfrac", "clip_fraction"), ("actor/ppo_kl", "approx_kl"),
                 ("actor/pg_clipfrac_lower", "clip_fraction_lower"))


def _policy_loss(mode: str, metrics: Tuple[Tuple[str, str], ...], options: Callable[[Any], Dict[str, Any]],
                 aggregation: Optional[str] = None) -> Callable[..., Tuple[torch.Tensor, Dict[str, float]]]:
    """A verl policy-loss function for one of the kernel's policy losses: verl's arguments,
    its metric names (``metrics``: verl name, PpoStats field), the options it reads from
    the config, and the aggregation verl forces for it (else ``loss_agg_mode``)."""

    def compute(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                response_mask: torch.Tensor, loss_agg_mode: str = aggregation or "token-mean", config: Any = None,
                rollout_is_weights: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Dict[str, float]]:
        if config is None:
            raise TypeError("tirl: expected an actor config for config but received None (verl asserts it too)")
        loss, stats = ppo_loss(log_prob, old_log_prob.to(torch.float32), advantages.to(torch.float32),
                               response_mask, aggregation=aggregation or loss_agg_mode, policy_loss=mode,
                               weights=_weights(rollout_is_weights, log_prob), **options(config),
                               **_normalizers(config))
        return loss, {name: getattr(stats, field) for name, field in metrics}

    compute.__name__ = compute.__qualname__ = f"compute_policy_loss_{mode}"
    compute.__doc__ = f"verl's compute_policy_loss_{mode} (core_algos.py at {VERL_COMMIT[:7]}) on tirl's kernel."
    return compute


def _clip_options(config: Any) -> Dict[str, Any]:
    clip_low, clip_high = _clip_range(config)
    return {"clip_low": clip_low, "clip_high": clip_high}


def _dro_options(config: Any) -> Dict[str, Any]:
    beta = read(read(config, "policy_loss"), "dro_beta")
    if beta is None or not beta > 0:
        raise ValueError(f"tirl: expected a positive value for config.policy_loss.dro_beta but received {beta!r}")
    return {"dro_beta": float(beta)}


compute_policy_loss_gpg = _policy_loss("gpg", (), lambda config: {})
compute_policy_loss_sapo = _policy_loss(
    "sapo", _CLIP_METRICS, lambda config: {"tau_pos": float(read(config, "tau_pos", 1.0)),
                                           "tau_neg": float(read(config, "tau_neg", 1.05))},
    aggregation="seq-mean-token-mean")
compute_policy_loss_cispo = _policy_loss("cispo", _CLIP_METRICS, _clip_options)
compute_policy_loss_dro = _policy_loss("dro", (("actor/ppo_kl", "approx_kl"),), _dro_options)

POLICY_LOSSES: Dict[str, Callable[..., Tuple[torch.Tensor, Dict[str, float]]]] = {
    "vanilla": compute_policy_loss_vanilla,
    "gspo": compute_policy_loss_gspo,
}
if hasattr(_abi.lib, "tirl_policy_loss"):  # offered only where the loaded library has the kernels
    POLICY_LOSSES.update(gpg=compute_policy_loss_gpg, sapo=compute_policy_loss_sapo,
                         cispo=compute_policy_loss_cispo, dro=compute_policy_loss_dro)
def _dense_groups(index: Any, device: torch.device) -> torch.Tensor:
    dense: Dict[Any, int] = {}
    ids = [dense.setdefault(key.item() if hasattr(key, "item") else key, len(dense)) for key in list(index)]
    return torch.tensor(ids, dtype=torch.int32, device=device)


def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any,
                                   epsilon: float = 1e-6, config: Any = None,
                                   **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """verl's RLOO: n/(n-1) (score - group mean) per group of ``index`` (a group of one keeps its score)."""
    advantages, returns = tirl_advantages(response_mask, estimator="rloo",
                                          token_rewards=token_level_rewards.to(torch.float32),
                                          group_ids=_dense_groups(index, token_level_rewards.device))
    return advantages, returns


def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  config: Any = None,
                                                  **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """verl's REINFORCE++: discounted returns over the response tokens (``config.gamma``),
    whitened over the batch's masked tokens; returns ``(advantages, returns)``."""
    return tirl_advantages(response_mask, estimator="reinforce_plus_plus",
                           token_rewards=token_level_rewards.to(torch.float32),
                           gamma=float(read(config, "gamma", 1.0)))


def compute_gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor,
                                 response_mask: torch.Tensor, gamma: Any, lam: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """verl's GAE, whitened advantages and returns (advantages + values before whitening).
    Unlike verl, masked-out tokens get advantage 0."""
    return tirl_advantages(response_mask, estimator="gae", token_rewards=token_level_rewards.to(torch.float32),
                           values=values.to(torch.float32), gamma=float(gamma), lam=float(lam))


ADV_ESTIMATORS: Dict[str, Callable[..., Tuple[torch.Tensor, torch.Tensor]]] = {
    "grpo": compute_grpo_outcome_advantage,
}
if hasattr(_abi.lib, "tirl_advantages"):  # offered only where the loaded library has the kernel
    ADV_ESTIMATORS.update(rloo=compute_rloo_outcome_advantage,
                          reinforce_plus_plus=compute_reinforce_plus_plus_outcome_advantage,
                          gae=compute_gae_advantage_return)


def _strip(name: Any) -> str:
    name = getattr(name, "value", name)  # verl's AdvantageEstimator enum
    if not isinstance(name, str):
        raise TypeError(f"tirl: expected a str for name but received {name!r}")
    return name[len("tirl_"):] if name.startswith("tirl_") else name


def get_policy_loss_fn(name: Any) -> Callable[..., Tuple[torch.Tensor, Dict[str, float]]]:
    """The policy loss for a verl ``loss_mode`` ('vanilla', 'gspo', or with a 'tirl_' prefix)."""
    mode = _strip(name)
    if mode not in POLICY_LOSSES:
        raise ValueError(f"Unsupported loss mode: {name}. Supported modes are: "
                         f"{list(POLICY_LOSSES)} (tirl's kernels)")
    return POLICY_LOSSES[mode]


def get_adv_estimator_fn(name: Any) -> Callable[..., Tuple[torch.Tensor, torch.Tensor]]:
    """The advantage estimator for a verl ``adv_estimator`` name ('grpo' or 'tirl_grpo')."""
    estimator = _strip(name)
    if estimator not in ADV_ESTIMATORS:
        raise ValueError(f"Unknown advantage estimator simply: {name} (tirl's kernels have {list(ADV_ESTIMATORS)})")
    return ADV_ESTIMATORS[estimator]


def register(core_algos: Any = None) -> bool:
    """Adds ``tirl_<mode>`` entries to verl's POLICY_LOSS_REGISTRY and
    ADV_ESTIMATOR_REGISTRY. ``core_algos`` defaults to ``verl.trainer.ppo.core_algos`` when
    verl is importable; without verl this does nothing and returns False."""
    if core_algos is None:
        try:
            from verl.trainer.ppo import core_algos  # type: ignore[no-redef]
        except ImportError:
            return False
    for mode, function in POLICY_LOSSES.items():
        core_algos.POLICY_LOSS_REGISTRY[f"tirl_{mode}"] = function
    for estimator, function in ADV_ESTIMATORS.items():
        core_algos.ADV_ESTIMATOR_REGISTRY[f"tirl_{estimator}"] = function
    return True

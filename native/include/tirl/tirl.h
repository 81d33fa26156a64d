/*
 * tirl — kernels for reinforcement learning of tool-using language-model agents.
 *
 * This header is the whole C ABI: every consumer (the Node.js addon, a C++ trainer,
 * PyTorch through ctypes) calls these functions. Read it top to bottom as the reference.
 *
 * Conventions
 *  - Ragged layout: all tokens of all sequences back to back. `seq_offsets` has
 *    num_seqs + 1 entries, starts at 0, never decreases and ends at num_tokens
 *    (like cu_seqlens). A padded [B, T] batch is seq_offsets[i] = i * T.
 *  - Masks are bytes; any nonzero value means "included".
 *  - Sizes are 64-bit. Arrays are dense and contiguous. seq_offsets are int32, so an op
 *    taking them handles at most 2^31 - 1 tokens per call (more is refused by name).
 *  - Every function returns a tirl_status; on failure tirl_last_error() returns a
 *    message for the calling thread, valid until that thread's next tirl call.
 *  - `device` selects where the pointers live: TIRL_DEVICE_CPU (host memory) or
 *    TIRL_DEVICE_CUDA (device memory, work queued on `device.stream`).
 *  - Options structs must be initialised from their tirl_*_options_default()
 *    function, which holds the documented defaults; then set what you need.
 *  - Results are deterministic: bitwise identical for any thread count.
 *
 * The formulas are in MATH.md; per-element math lives in native/src/math/.
 */
#ifndef TIRL_TIRL_H
#define TIRL_TIRL_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TIRL_API __declspec(dllexport)
#else
#define TIRL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TIRL_VERSION_STRING "0.1.0"

/* Enums are int-sized as in C. C++ sees them with int as their fixed underlying type, so
 * that any int a C caller stores in one is a value the library can check and refuse, not
 * undefined behaviour. */
#ifdef __cplusplus
#define TIRL_ENUM_BASE : int
#else
#define TIRL_ENUM_BASE
#endif

/* ---------------------------------------------------------------- status */

typedef enum tirl_status TIRL_ENUM_BASE {
  TIRL_OK = 0,
  TIRL_ERROR_INVALID_ARGUMENT = 1, /* a pointer, size, value or option out of range */
  TIRL_ERROR_OUT_OF_MEMORY = 2,
  TIRL_ERROR_UNSUPPORTED = 3,      /* e.g. a CUDA device when the CUDA library is absent */
  TIRL_ERROR_CUDA = 4,             /* the CUDA runtime reported an error (message says which) */
  TIRL_ERROR_INTERNAL = 5
} tirl_status;

/* Message of the last failed call on this thread ("" when none). */
TIRL_API const char* tirl_last_error(void);

/* ---------------------------------------------------------------- library */

TIRL_API const char* tirl_version(void);
/* Threads used by CPU kernels. Default: TIRL_NUM_THREADS, else the CPUs this process may use. */
TIRL_API int32_t tirl_num_threads(void);
/* n >= 1; returns TIRL_ERROR_INVALID_ARGUMENT otherwise. Takes effect for later calls. */
TIRL_API tirl_status tirl_set_num_threads(int32_t n);
/* The SIMD code path the CPU kernels run on this machine, e.g. "avx2", "avx512", "sse2". */
TIRL_API const char* tirl_simd_level(void);
/* Compiler and flags the library was built with. */
TIRL_API const char* tirl_build_info(void);

/* ---------------------------------------------------------------- devices */

typedef enum tirl_device_type TIRL_ENUM_BASE {
  TIRL_DEVICE_CPU = 0,
  TIRL_DEVICE_CUDA = 1
} tirl_device_type;

typedef struct tirl_device {
  tirl_device_type type;
  int32_t index; /* CUDA device ordinal; ignored on the CPU */
  void* stream;  /* cudaStream_t to queue work on; NULL = the default stream */
} tirl_device;

/* The host: { TIRL_DEVICE_CPU, 0, NULL }. */
TIRL_API tirl_device tirl_cpu(void);

typedef enum tirl_dtype TIRL_ENUM_BASE { TIRL_DTYPE_F32 = 0, TIRL_DTYPE_BF16 = 1 } tirl_dtype;

/* ---------------------------------------------------------------- CUDA
 * The CUDA kernels live in libtirl_cuda.so, loaded on first use from the directory this
 * library was loaded from; nothing here needs CUDA to be installed. With a CUDA device,
 * every op takes device pointers and queues its work on device.stream. Ops that return
 * results in host memory (a result struct) or that validate device data (seq_offsets,
 * roles, labels) wait for their stream before returning; pointer and size checks that
 * need no device data happen on the host first. Buffers from any allocator (PyTorch's
 * included) may be passed: the helpers below are a convenience, not a requirement.
 */

/* 1 when the CUDA library loaded and the driver reports at least one device, else 0. */
TIRL_API int32_t tirl_cuda_available(void);
/* Why CUDA is unavailable ("" when it is available): the library was not built or not
 * found, no NVIDIA driver, a CUDA error from cudaGetDeviceCount, or no device. */
TIRL_API const char* tirl_cuda_status(void);

/* Allocates `bytes` of zeroed memory on CUDA device device.index (cudaMalloc); *pointer is
 * NULL on failure. */
TIRL_API tirl_status tirl_cuda_malloc(tirl_device device, size_t bytes, void** pointer);
/* Frees memory from tirl_cuda_malloc (NULL is a no-op); waits for work using it. */
TIRL_API tirl_status tirl_cuda_free(tirl_device device, void* pointer);
/* Copies `bytes` between host and device memory in the order of device.stream and returns
 * once the copy is complete (the host buffer may be reused at once). */
TIRL_API tirl_status tirl_cuda_memcpy_h2d(tirl_device device, void* device_destination,
                                         const void* host_source, size_t bytes);
TIRL_API tirl_status tirl_cuda_memcpy_d2h(tirl_device device, void* host_destination,
                                         const void* device_source, size_t bytes);
/* Waits for all work queued on device.stream; reports an error a kernel raised. */
TIRL_API tirl_status tirl_cuda_synchronize(tirl_device device);

/* ---------------------------------------------------------------- ppoLoss */

typedef enum tirl_aggregation TIRL_ENUM_BASE {
  TIRL_AGG_TOKEN_MEAN = 0,
  TIRL_AGG_TOKEN_SUM = 1,
  TIRL_AGG_SEQ_MEAN_TOKEN_SUM = 2,
  TIRL_AGG_SEQ_MEAN_TOKEN_MEAN = 3,
  TIRL_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 4
} tirl_aggregation;

typedef enum tirl_kl_estimator TIRL_ENUM_BASE {
  TIRL_KL_K1 = 0,
  TIRL_KL_K2 = 1,
  TIRL_KL_K3 = 2,  /* verl's 'k3' and 'low_var_kl' */
  TIRL_KL_ABS = 3,
  /* verl's straight-through '+' forms: the value of k1, k3 or abs, the gradient of k2
     (logp - ref_logp, unclamped). */
  TIRL_KL_K1_PLUS = 4,
  TIRL_KL_K3_PLUS = 5,
  TIRL_KL_ABS_PLUS = 6
} tirl_kl_estimator;

typedef enum tirl_ratio_level TIRL_ENUM_BASE {
  TIRL_RATIO_TOKEN = 0,
  TIRL_RATIO_SEQUENCE = 1 /* GSPO */
} tirl_ratio_level;

typedef struct tirl_ppo_options {
  double clip_low;           /* 0.2; ratio clipped below at 1 - clip_low; in [0, 1) */
  double clip_high;          /* 0.2; ratio clipped above at 1 + clip_high; >= 0 */
  double dual_clip;          /* 0 = off; > 1 enables dual-clip for A < 0 (token ratio only) */
  tirl_aggregation aggregation; /* TIRL_AGG_TOKEN_MEAN */
  double token_normalizer;   /* 0 = default (masked token count); else > 0 */
  double seq_normalizer;     /* 0 = default (non-empty sequences); else > 0 */
  double horizon;            /* 0 = default (longest sequence, in tokens); else > 0 */
  double dp_size;            /* 1; data-parallel size D multiplying the loss */
  double kl_coef;            /* 0; weight of the KL-to-reference term; > 0 needs ref_logp */
  tirl_kl_estimator kl_estimator; /* TIRL_KL_K3 */
  tirl_ratio_level ratio_level;   /* TIRL_RATIO_TOKEN */
} tirl_ppo_options;

typedef struct tirl_ppo_result {
  double loss;                /* pg_loss + kl_coef * kl_loss */
  double pg_loss;
  double kl_loss;             /* 0 when no reference is given */
  double clip_fraction;       /* masked mean of [L2 > L1] */
  double clip_fraction_lower; /* masked mean of [A < 0 and Lc > -A * dual_clip] */
  double approx_kl;           /* masked mean of -(clamped log-ratio) */
  int64_t non_finite;         /* masked-in tokens with a non-finite input */
  int64_t masked_tokens;      /* masked-in tokens */
} tirl_ppo_result;

TIRL_API tirl_ppo_options tirl_ppo_options_default(void);

/*
 * PPO clipped surrogate over masked tokens, fused with its gradient.
 * logp, old_logp, advantages, mask: [num_tokens]. seq_offsets: [num_seqs + 1], or NULL
 * (then num_seqs must be 0) for the token-level aggregations with the token ratio.
 * ref_logp (KL term) and weights (per-token loss weights, no gradient) may be NULL.
 * grad: [num_tokens] receives dLoss/dlogp, or NULL to skip it. result: must not be NULL.
 * Masked-out tokens contribute nothing and get gradient 0 whatever their inputs; a zero
 * default normaliser (nothing masked in) gives loss 0 and gradient 0.
 */
TIRL_API tirl_status tirl_ppo_loss(const float* logp, const float* old_logp,
                                   const float* advantages, const uint8_t* mask,
                                   int64_t num_tokens, const int32_t* seq_offsets,
                                   int64_t num_seqs, const float* ref_logp,
                                   const float* weights, const tirl_ppo_options* options,
                                   float* grad, tirl_ppo_result* result, tirl_device device);

/* ---------------------------------------------------------------- groupAdvantages */

typedef struct tirl_group_advantages_options {
  int32_t scale_by_std; /* 1; 0 = Dr.GRPO (no division by the std) */
  double epsilon;       /* 1e-6; added to the std; >= 0 */
} tirl_group_advantages_options;

TIRL_API tirl_group_advantages_options tirl_group_advantages_options_default(void);

/*
 * GRPO advantages: A_i = (r_i - mean_g) / (std_g + epsilon), std unbiased; a group of one
 * has mean 0 and std 1. Groups come from group_ids ([num_rewards], any order, any int32)
 * or, when group_ids is NULL, from contiguous runs of group_size (which must divide
 * num_rewards). advantages: [num_rewards].
 */
TIRL_API tirl_status tirl_group_advantages(const float* rewards, int64_t num_rewards,
                                           const int32_t* group_ids, int64_t group_size,
                                           const tirl_group_advantages_options* options,
                                           float* advantages, tirl_device device);

/* ---------------------------------------------------------------- advantages */

/* verl's advantage estimators, by their registry keys (verl/trainer/ppo/core_algos.py). */
typedef enum tirl_advantage_estimator TIRL_ENUM_BASE {
  TIRL_ADV_GRPO = 0,                        /* "grpo" */
  TIRL_ADV_GRPO_PASSK = 1,                  /* "grpo_passk" */
  TIRL_ADV_GDPO = 2,                        /* "gdpo" */
  TIRL_ADV_RLOO = 3,                        /* "rloo" */
  TIRL_ADV_REINFORCE_PLUS_PLUS = 4,         /* "reinforce_plus_plus" */
  TIRL_ADV_REINFORCE_PLUS_PLUS_BASELINE = 5,/* "reinforce_plus_plus_baseline" */
  TIRL_ADV_REMAX = 6,                       /* "remax" */
  TIRL_ADV_OPO = 7,                         /* "opo" */
  TIRL_ADV_GPG = 8,                         /* "gpg" */
  TIRL_ADV_GAE = 9,                         /* "gae" */
  TIRL_ADV_OPTIMAL_TOKEN_BASELINE = 10,     /* "optimal_token_baseline" */
  TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE = 11  /* "tir_optimal_token_baseline" */
} tirl_advantage_estimator;

typedef struct tirl_advantages_options {
  tirl_advantage_estimator estimator; /* TIRL_ADV_GRPO */
  int32_t norm_adv_by_std;  /* 1; grpo, grpo_passk, gdpo: divide by the group std (0 = Dr.GRPO) */
  double epsilon;           /* -1 = the estimator's default: 1e-8 for the optimal-token
                               baselines, 1e-6 otherwise; else finite and >= 0 */
  double gamma;             /* 1; reinforce_plus_plus, gae: discount in [0, 1] */
  double lam;               /* 1; gae: lambda in [0, 1] */
  double f_norm;            /* 1; gpg: divisor, finite and > 0 */
  int32_t handle_zero_tail; /* 1; optimal-token baselines: see tirl_advantages */
  int64_t num_reward_keys;  /* 1; gdpo: K reward components (rewards holds K * num_seqs) */
  int64_t group_size;       /* 0 = groups from group_ids; else contiguous groups of this size */
} tirl_advantages_options;

/* The arrays an estimator reads; an array it does not read must be NULL. */
typedef struct tirl_advantages_inputs {
  const float* rewards;          /* [num_reward_keys * num_seqs] sequence scores (key-major), or NULL */
  const float* token_rewards;    /* [num_tokens] verl's token_level_rewards, or NULL */
  const uint8_t* mask;           /* [num_tokens] response (action) mask */
  const int32_t* seq_offsets;    /* [num_seqs + 1] */
  const int32_t* group_ids;      /* [num_seqs] any int32, any order; or NULL (group_size) */
  const float* values;           /* gae: [num_tokens] critic values */
  const float* reward_baselines; /* remax: [num_seqs] reward of the greedy rollout */
  const float* old_logp;         /* optimal-token baselines: [num_tokens] */
  const float* sum_pi_squared;   /* optimal-token baselines: [num_tokens] sum_v pi_v^2 */
  const float* rollout_is_weights; /* optimal-token baselines: [num_tokens] or NULL */
  const float* reward_weights;   /* gdpo: [num_reward_keys] or NULL (all 1) */
} tirl_advantages_inputs;

TIRL_API tirl_advantages_options tirl_advantages_options_default(void);

/*
 * Advantages (and returns) of one estimator, as verl computes them, over the ragged
 * layout (formulas: docs/math.md "Advantage estimators").
 * Rewards: give exactly one of rewards (a score per sequence) and token_rewards (a reward
 * per token; token_rewards may be NULL only when num_tokens is 0). A sequence's score is
 * its rewards entry or the sum of its token rewards (all tokens, as verl sums
 * token_level_rewards); a token-level estimator sees a sequence score as a reward on the
 * sequence's last masked-in token.
 * Groups (grpo, grpo_passk, gdpo, rloo, reinforce_plus_plus_baseline, opo, gpg and the
 * optimal-token baselines): group_ids, or contiguous runs of options->group_size (which
 * must divide num_seqs); the other estimators take neither.
 * The optimal-token baselines index a sequence's tokens from its first masked-in token
 * (optimal_token_baseline, verl's response columns) or count its masked-in tokens only
 * (tir_optimal_token_baseline, which skips tool feedback as verl does).
 * advantages: [num_tokens], 0 on masked-out tokens. returns: [num_tokens] or NULL; what
 * verl returns beside the advantages: the advantages themselves for the outcome
 * estimators, the discounted returns (reinforce_plus_plus), the reward-to-go (remax and
 * the optimal-token baselines, on every token), advantages + values before whitening (gae).
 */
TIRL_API tirl_status tirl_advantages(const tirl_advantages_inputs* inputs, int64_t num_tokens,
                                     int64_t num_seqs, const tirl_advantages_options* options,
                                     float* advantages, float* returns, tirl_device device);

/* ---------------------------------------------------------------- dpoLoss */

typedef enum tirl_dpo_variant TIRL_ENUM_BASE {
  TIRL_DPO_SIGMOID = 0,
  TIRL_DPO_HINGE = 1,
  TIRL_DPO_IPO = 2,
  TIRL_DPO_ROBUST = 3
} tirl_dpo_variant;

typedef struct tirl_dpo_options {
  double beta;            /* 0.1; > 0 */
  double label_smoothing; /* 0; in [0, 0.5) */
  tirl_dpo_variant variant; /* TIRL_DPO_SIGMOID */
} tirl_dpo_options;

typedef struct tirl_dpo_result {
  double loss;            /* mean over pairs; 0 when there are none */
  double reward_accuracy; /* mean of [chosen reward > rejected reward] */
} tirl_dpo_result;

TIRL_API tirl_dpo_options tirl_dpo_options_default(void);

/*
 * DPO family on summed (or, for IPO, averaged) completion log-probs, [num_pairs] each.
 * grad_chosen / grad_rejected receive dLoss/dpolicy_chosen and dLoss/dpolicy_rejected;
 * chosen_rewards / rejected_rewards receive beta * (policy - reference). Each output may
 * be NULL to skip it; result must not be NULL.
 */
TIRL_API tirl_status tirl_dpo_loss(const float* policy_chosen, const float* policy_rejected,
                                   const float* ref_chosen, const float* ref_rejected,
                                   int64_t num_pairs, const tirl_dpo_options* options,
                                   float* grad_chosen, float* grad_rejected,
                                   float* chosen_rewards, float* rejected_rewards,
                                   tirl_dpo_result* result, tirl_device device);

/* ---------------------------------------------------------------- feedbackMask */

typedef enum tirl_role TIRL_ENUM_BASE {
  TIRL_ROLE_PROMPT = 0,
  TIRL_ROLE_ACTION = 1,   /* sampled from the policy: the only role that is trained on */
  TIRL_ROLE_FEEDBACK = 2, /* tool or environment output */
  TIRL_ROLE_PADDING = 3
} tirl_role;

/*
 * Loss mask from token roles: mask[t] = 1 where roles[t] is an action token of a kept
 * sequence. roles: [num_tokens] with values 0..3; keep: [num_seqs] or NULL (keep all).
 * mask: [num_tokens]; action_tokens: [num_seqs] receives each sequence's mask count
 * (may be NULL). On CUDA, roles and seq_offsets are validated on the device and the call
 * waits for its stream to report them.
 */
TIRL_API tirl_status tirl_feedback_mask(const uint8_t* roles, int64_t num_tokens,
                                        const int32_t* seq_offsets, int64_t num_seqs,
                                        const uint8_t* keep, uint8_t* mask,
                                        int32_t* action_tokens, tirl_device device);

/* ---------------------------------------------------------------- sequenceLogprobs */

/*
 * Per-sequence sum of masked token log-probs, or their mean when average != 0 (a sequence
 * with no masked tokens gets 0). logp, mask: [num_tokens]; out: [num_seqs].
 */
TIRL_API tirl_status tirl_sequence_logprobs(const float* logp, const uint8_t* mask,
                                            int64_t num_tokens, const int32_t* seq_offsets,
                                            int64_t num_seqs, int32_t average, float* out,
                                            tirl_device device);

/* Its backward: grad_logp[t] = mask[t] * grad_seq[i] (divided by |y_i| when averaging). */
TIRL_API tirl_status tirl_sequence_logprobs_backward(const float* grad_seq, const uint8_t* mask,
                                                     int64_t num_tokens,
                                                     const int32_t* seq_offsets,
                                                     int64_t num_seqs, int32_t average,
                                                     float* grad_logp, tirl_device device);

/* ---------------------------------------------------------------- rolloutCorrection
 * The engine that sampled (vLLM, SGLang) is not the trainer: their log-probs differ. From
 * d = logp - rollout_logp per masked-in token this computes importance weights, rejection
 * masks and off-policy diagnostics, with verl's conventions and metric names
 * (verl/trainer/ppo/rollout_corr_helper.py; formulas in docs/math.md).
 */

typedef enum tirl_rollout_is_level TIRL_ENUM_BASE {
  TIRL_ROLLOUT_IS_NONE = 0,     /* no importance weights (weights are 1 on masked-in tokens) */
  TIRL_ROLLOUT_IS_TOKEN = 1,    /* w_t = exp(clamp(d_t, -20, 20)) */
  TIRL_ROLLOUT_IS_SEQUENCE = 2  /* every token of sequence i: exp(clamp(sum_t d_t, -20, 20)) */
} tirl_rollout_is_level;

/* Rejection options (verl's rollout_rs names); bit (1u << option) of options.rollout_rs.
 * k1 = -d, k2 = d^2 / 2, k3 = exp(d) - 1 - d on the clamped d; token_* decide per token,
 * seq_sum_* / seq_mean_* / seq_max_* per sequence from the masked sum, mean or max. */
typedef enum tirl_rollout_rs_option TIRL_ENUM_BASE {
  TIRL_ROLLOUT_RS_TOKEN_K1 = 0,
  TIRL_ROLLOUT_RS_TOKEN_K2 = 1,
  TIRL_ROLLOUT_RS_TOKEN_K3 = 2,
  TIRL_ROLLOUT_RS_SEQ_SUM_K1 = 3,
  TIRL_ROLLOUT_RS_SEQ_SUM_K2 = 4,
  TIRL_ROLLOUT_RS_SEQ_SUM_K3 = 5,
  TIRL_ROLLOUT_RS_SEQ_MEAN_K1 = 6,
  TIRL_ROLLOUT_RS_SEQ_MEAN_K2 = 7,
  TIRL_ROLLOUT_RS_SEQ_MEAN_K3 = 8,
  TIRL_ROLLOUT_RS_SEQ_MAX_K2 = 9,
  TIRL_ROLLOUT_RS_SEQ_MAX_K3 = 10,
  TIRL_ROLLOUT_RS_COUNT = 11
} tirl_rollout_rs_option;

typedef struct tirl_rollout_correction_options {
  tirl_rollout_is_level rollout_is;   /* TIRL_ROLLOUT_IS_SEQUENCE (verl's default) */
  double rollout_is_threshold;        /* 2.0; upper bound of the weights; finite, > 0 */
  double rollout_is_threshold_lower;  /* 0 = TIS: weights truncated at the upper bound;
                                         > 0 (and <= upper) = IcePop: weights outside
                                         [lower, upper] are 0 */
  int32_t rollout_is_batch_normalize; /* 0; 1 = divide the weights by their batch mean */
  uint32_t rollout_rs;                /* 0 = no rejection; bits (1u << tirl_rollout_rs_option)
                                         of the options chained: a token is kept only if
                                         every one keeps it */
  /* Per option, indexed by tirl_rollout_rs_option; read only for enabled options.
   * rollout_rs_threshold: required, finite, > 0. k2 / k3 options keep a statistic
   * <= upper, and their rollout_rs_threshold_lower must be 0. k1 options (statistic
   * -d = log(rollout / trainer)) take ratio bounds: keep log(lower) <= statistic <=
   * log(upper), lower = rollout_rs_threshold_lower, or 1 / upper when that is 0. */
  double rollout_rs_threshold[TIRL_ROLLOUT_RS_COUNT];
  double rollout_rs_threshold_lower[TIRL_ROLLOUT_RS_COUNT];
} tirl_rollout_correction_options;

/* Statistics of one rejection option (verl's rollout_rs_<option>_<name>). "Sequences" are
 * those with a masked-in token; the statistic of a sequence option is its sequence value
 * at each of its tokens. Bounds are in the statistic's units (log of the ratio bounds for
 * k1; lower 0 for k2 / k3). */
typedef struct tirl_rollout_rs_stats {
  double masked_fraction;     /* masked-in tokens this option rejects / masked-in tokens */
  double seq_masked_fraction; /* sequences with a token it rejects / sequences */
  double mean;                /* masked mean of the statistic */
  double max, min;            /* over tokens (token options) or sequences (sequence options) */
  double std;                 /* sqrt(E[x^2] - E[x]^2) of the statistic clamped to the bounds */
  double fraction_high;       /* tokens (or sequences) above the upper bound */
  double fraction_low;        /* ... below the lower bound (k1 only, else 0) */
  double seq_mean, seq_std;   /* over sequences of the sequence value (the masked mean for
                                 token options); std unbiased, 0 for one sequence */
  double seq_max, seq_min;
  double seq_max_deviation;   /* max |value| (the ideal is 0) */
  double seq_fraction_high;   /* sequences with value above the upper bound */
  double seq_fraction_low;    /* ... below the lower bound (k1 only, else 0) */
} tirl_rollout_rs_stats;

/* verl's metric names without the "rollout_corr/" prefix. Means over "sequences" are over
 * sequences with a masked-in token; with no masked-in token every statistic is 0. */
typedef struct tirl_rollout_correction_result {
  /* Importance weights (all 0 when rollout_is is NONE), before batch normalisation. */
  double rollout_is_mean;     /* masked mean of the applied weights */
  double rollout_is_max;      /* token: max applied weight; sequence: exp(min(max_i sum d, 20)) */
  double rollout_is_min;      /* token: min applied weight; sequence: exp(min_i sum d) */
  double rollout_is_std;      /* std of the applied weights clamped to [0, upper] */
  double rollout_is_eff_sample_size; /* 1 / E[(c / (E[c] + 1e-8))^2], c = clamp(w, 0, upper) */
  double rollout_is_ratio_fraction_high; /* token: raw weight > upper; sequence: sum d > log upper */
  double rollout_is_ratio_fraction_low;  /* ... < lower (1 / upper for TIS) */
  double rollout_is_seq_mean, rollout_is_seq_std, rollout_is_seq_max, rollout_is_seq_min;
                              /* over sequences of the mean applied weight per sequence */
  double rollout_is_seq_max_deviation; /* max |sequence mean weight - 1| */
  double rollout_is_seq_fraction_high; /* sequences whose mean raw weight is > upper */
  double rollout_is_seq_fraction_low;  /* ... < lower */
  double rollout_is_batch_norm_factor; /* the divisor applied (1 when off or <= 1e-8) */
  double rollout_is_oob_ratio;         /* IcePop: masked tokens with raw weight outside the band */
  /* Rejection (0 when rollout_rs is 0). */
  double rollout_rs_masked_fraction;     /* masked-in tokens rejected by any option */
  double rollout_rs_seq_masked_fraction; /* sequences with a rejected token */
  tirl_rollout_rs_stats rollout_rs[TIRL_ROLLOUT_RS_COUNT]; /* enabled options only, else 0 */
  /* Off-policy diagnostics (always). */
  double training_ppl;      /* mean over sequences of exp(-mean logp) */
  double training_log_ppl;  /* mean over sequences of -mean logp */
  double kl;                /* masked mean of rollout_logp - logp: KL(rollout || trainer) */
  double k3_kl;             /* masked mean of exp(d) - d - 1 (d not clamped, as verl) */
  double rollout_ppl, rollout_log_ppl;
  double log_ppl_diff;      /* mean over sequences of mean rollout_logp - mean logp */
  double log_ppl_abs_diff, log_ppl_diff_max, log_ppl_diff_min;
  double ppl_ratio;         /* mean over sequences of exp(log_ppl_diff) */
  double chi2_token;        /* masked mean of exp(2 clamp(d)) - 1 */
  double chi2_seq;          /* mean over sequences of exp(2 clamp(sum d)) - 1 */
  int64_t masked_tokens;    /* masked-in tokens */
  int64_t valid_seqs;       /* sequences with a masked-in token */
  int64_t non_finite;       /* masked-in tokens with a non-finite logp or rollout_logp */
} tirl_rollout_correction_result;

TIRL_API tirl_rollout_correction_options tirl_rollout_correction_options_default(void);

/*
 * Rollout correction over the ragged batch. logp (the trainer's log-probs, verl's
 * old_log_prob), rollout_logp, mask: [num_tokens]; seq_offsets: [num_seqs + 1].
 * weights: [num_tokens] receives the importance weights (0 where masked out; pass them to
 * tirl_ppo_loss's weights, no gradient flows through them). mask_out: [num_tokens]
 * receives the mask with rejected tokens cleared (verl's modified response_mask; it may
 * be `mask` itself). result must not be NULL. NaN and Inf propagate into
 * the statistics as IEEE says and are counted in non_finite; a NaN statistic rejects.
 */
TIRL_API tirl_status tirl_rollout_correction(const float* logp, const float* rollout_logp,
                                             const uint8_t* mask, int64_t num_tokens,
                                             const int32_t* seq_offsets, int64_t num_seqs,
                                             const tirl_rollout_correction_options* options,
                                             float* weights, uint8_t* mask_out,
                                             tirl_rollout_correction_result* result,
                                             tirl_device device);

/* ---------------------------------------------------------------- ppoLoss: every policy loss
 *
 * tirl_policy_loss computes any of verl's registered policy losses (verl's registry keys in
 * the comments), fused with its gradient; see docs/math.md, "Policy losses". With
 * TIRL_POLICY_VANILLA and TIRL_POLICY_GSPO it equals tirl_ppo_loss (GSPO is
 * ratio_level = TIRL_RATIO_SEQUENCE). tirl_ppo_options and tirl_ppo_loss stay as they are.
 */
typedef enum tirl_policy_loss_kind TIRL_ENUM_BASE {
  TIRL_POLICY_VANILLA = 0,     /* 'vanilla': PPO clip (dual clip with ppo.dual_clip) */
  TIRL_POLICY_GSPO = 1,        /* 'gspo': sequence-level ratio */
  TIRL_POLICY_DPPO_TV = 2,     /* 'dppo_tv': binary total-variation trust region */
  TIRL_POLICY_DPPO_KL = 3,     /* 'dppo_kl': binary KL trust region */
  TIRL_POLICY_SAPO = 4,        /* 'sapo': soft sigmoid gate */
  TIRL_POLICY_GPG = 5,         /* 'gpg': -logp * A */
  TIRL_POLICY_CLIP_COV = 6,    /* 'clip_cov': PPO clip, random high-covariance tokens dropped */
  TIRL_POLICY_KL_COV = 7,      /* 'kl_cov': -A r, |log-ratio| penalty on top-covariance tokens */
  TIRL_POLICY_GEO_MEAN = 8,    /* 'geo_mean': GMPO, geometric mean of clipped token ratios */
  TIRL_POLICY_DRO = 9,         /* 'dro': -(logp A - beta/2 (logp - old_logp)^2) */
  TIRL_POLICY_CISPO = 10,      /* 'cispo': -sg(clip(r)) A logp */
  TIRL_POLICY_REINFORCE = 11,  /* 'reinforce': -A logp (weights = detached IS weights) */
  TIRL_POLICY_BYPASS_MODE = 12 /* 'bypass_mode': old_logp is the rollout's; see loss_type */
} tirl_policy_loss_kind;

typedef enum tirl_bypass_loss_type TIRL_ENUM_BASE {
  TIRL_BYPASS_PPO_CLIP = 0, /* vanilla on (logp, old_logp = rollout logp), no IS weights */
  TIRL_BYPASS_REINFORCE = 1 /* reinforce with IS weights computed from logp - old_logp */
} tirl_bypass_loss_type;

/* Defaults from tirl_policy_loss_options_default(); verl's config key in the comment. */
typedef struct tirl_policy_loss_options {
  uint32_t struct_size;            /* sizeof(tirl_policy_loss_options): set by the default */
  tirl_policy_loss_kind policy_loss; /* TIRL_POLICY_VANILLA (loss_mode) */
  tirl_ppo_options ppo;            /* clipping (DPPO: the divergence bounds), aggregation,
                                      normalisers, KL term; tirl_ppo_options_default() */
  double clip_ratio_c;             /* 3.0 (clip_ratio_c): DPPO's truncation, > 1 */
  double tau_pos;                  /* 1.0 (tau_pos): SAPO, > 0 */
  double tau_neg;                  /* 1.05 (tau_neg): SAPO, > 0 */
  double clip_cov_ratio;           /* 0.0002 (clip_cov_ratio), in (0, 1] */
  double clip_cov_lb;              /* 1.0 (clip_cov_lb) */
  double clip_cov_ub;              /* 5.0 (clip_cov_ub), > clip_cov_lb */
  double kl_cov_ratio;             /* 0.0002 (kl_cov_ratio), in (0, 1] */
  double ppo_kl_coef;              /* 0.1 (ppo_kl_coef), >= 0 */
  double dro_beta;                 /* 0 = unset (dro_beta); 'dro' needs > 0 */
  uint64_t seed;                   /* 0: clip_cov's random pick (docs/math.md) */
  tirl_bypass_loss_type loss_type; /* TIRL_BYPASS_PPO_CLIP (rollout_correction.loss_type) */
  tirl_rollout_is_level rollout_is; /* TIRL_ROLLOUT_IS_NONE (rollout_correction.rollout_is; the
                                       rolloutCorrection section's enum) */
  double rollout_is_threshold;     /* 2.0: upper bound, > 0 */
  double rollout_is_threshold_lower; /* 0 = TIS (truncate); > 0: IcePop band [lower, upper] */
  int32_t rollout_is_batch_normalize; /* 0: 1 = divide the weights by their mean */
} tirl_policy_loss_options;

typedef struct tirl_policy_loss_result {
  uint32_t struct_size;   /* sizeof(tirl_policy_loss_result): set by the caller */
  tirl_ppo_result ppo;    /* loss, pg_loss, kl_loss, statistics (meaning per loss: docs/math.md) */
  int64_t selected_tokens; /* clip_cov: tokens zeroed; kl_cov: tokens given the KL term */
  double rollout_is_batch_norm_factor; /* bypass_mode reinforce with batch normalisation; else 1 */
} tirl_policy_loss_result;

TIRL_API tirl_policy_loss_options tirl_policy_loss_options_default(void);

/*
 * Any policy loss over masked tokens, fused with its gradient. Arguments as tirl_ppo_loss;
 * options->struct_size and result->struct_size must be the sizes of this header's structs.
 * seq_offsets is also needed by geo_mean and by bypass_mode's sequence-level IS weights.
 * weights may be NULL; bypass_mode takes none (it computes its own).
 */
TIRL_API tirl_status tirl_policy_loss(const float* logp, const float* old_logp,
                                      const float* advantages, const uint8_t* mask,
                                      int64_t num_tokens, const int32_t* seq_offsets,
                                      int64_t num_seqs, const float* ref_logp,
                                      const float* weights,
                                      const tirl_policy_loss_options* options, float* grad,
                                      tirl_policy_loss_result* result, tirl_device device);

/* ---------------------------------------------------------------- tokenLogprobs */

/* The temperatures tokenLogprobs accepts: log2(e) / T stays a normal float, so a scaled
 * logit difference is exact or rounds to 0 or -inf, never to NaN (0 * inf). */
#define TIRL_MIN_TEMPERATURE 1e-37
#define TIRL_MAX_TEMPERATURE 1e37

/*
 * Log-probability of each label under softmax(logits / temperature), and optionally the
 * entropy of that distribution, without materialising the probabilities.
 * logits: [num_tokens * vocab_size] of dtype (f32, or bf16 as raw uint16 bits);
 * labels: [num_tokens] in [0, vocab_size);
 * temperature in [TIRL_MIN_TEMPERATURE, TIRL_MAX_TEMPERATURE].
 * logp: [num_tokens]; entropy: [num_tokens] or NULL to skip it.
 * num_tokens * vocab_size may exceed 2^31 (indices are 64-bit); on CUDA a call takes at
 * most 2^31 - 1 tokens (one block per token row), more is TIRL_ERROR_UNSUPPORTED.
 */
TIRL_API tirl_status tirl_token_logprobs(const void* logits, tirl_dtype dtype,
                                         int64_t num_tokens, int64_t vocab_size,
                                         const int32_t* labels, double temperature,
                                         float* logp, float* entropy, tirl_device device);

/*
 * dLoss/dlogits given dLoss/dlogp (and dLoss/dentropy, or NULL). grad_logits:
 * [num_tokens * vocab_size] f32; it may be the logits buffer itself when dtype is f32
 * (an in-place backward).
 */
TIRL_API tirl_status tirl_token_logprobs_backward(const void* logits, tirl_dtype dtype,
                                                  int64_t num_tokens, int64_t vocab_size,
                                                  const int32_t* labels, double temperature,
                                                  const float* grad_logp,
                                                  const float* grad_entropy,
                                                  float* grad_logits, tirl_device device);

#ifdef __cplusplus
}
#endif

#endif /* TIRL_TIRL_H */

/* A plain C99 program linking libtirl: proves the C ABI stands on its own, without
 * Node.js or C++. It checks every op on hand-worked batches, and the error paths. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tirl/tirl.h"
#include "check.h"

static void test_feedback_mask(void) {
  /* Two sequences: [prompt prompt action feedback action] and [prompt action padding]. */
  const uint8_t roles[8] = {0, 0, 1, 2, 1, 0, 1, 3};
  const int32_t offsets[3] = {0, 5, 8};
  const uint8_t keep[2] = {1, 0};
  const uint8_t expected_all[8] = {0, 0, 1, 0, 1, 0, 1, 0};
  const uint8_t expected_kept[8] = {0, 0, 1, 0, 1, 0, 0, 0};
  uint8_t mask[8];
  int32_t counts[2];
  tirl_status s = tirl_feedback_mask(roles, 8, offsets, 2, NULL, mask, counts, tirl_cpu());
  CHECK(s == TIRL_OK, "feedback_mask status %d: %s", (int)s, tirl_last_error());
  CHECK(memcmp(mask, expected_all, 8) == 0, "feedback_mask mask without keep");
  CHECK(counts[0] == 2 && counts[1] == 1, "action counts %d %d", counts[0], counts[1]);

  s = tirl_feedback_mask(roles, 8, offsets, 2, keep, mask, counts, tirl_cpu());
  CHECK(s == TIRL_OK, "feedback_mask with keep: %s", tirl_last_error());
  CHECK(memcmp(mask, expected_kept, 8) == 0, "feedback_mask mask with keep");
  CHECK(counts[0] == 2 && counts[1] == 0, "kept counts %d %d", counts[0], counts[1]);
}

static void test_ppo_loss(void) {
  /* The hand-worked case of test/ppo_loss.test.ts: d = [0.1, -0.5, 0], A = [1, -1, 2];
   * token 1 is clipped at 0.8, so loss = (-e^0.1 + 0.8 - 2) / 3. */
  const float logp[3] = {-1.0f, -2.0f, -0.5f};
  const float old_logp[3] = {-1.1f, -1.5f, -0.5f};
  const float advantages[3] = {1.0f, -1.0f, 2.0f};
  const uint8_t mask[3] = {1, 1, 1};
  float grad[3];
  tirl_ppo_result result;
  tirl_ppo_options options = tirl_ppo_options_default();
  const double e = exp(0.1);
  tirl_status s = tirl_ppo_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL, &options,
                                grad, &result, tirl_cpu());
  CHECK(s == TIRL_OK, "ppo_loss status %d: %s", (int)s, tirl_last_error());
  CHECK(fabs(result.loss - (-e + 0.8 - 2.0) / 3.0) < 1e-6, "ppo loss %.9g", result.loss);
  CHECK(fabs(grad[0] + e / 3.0) < 1e-6 && grad[1] == 0.0f && fabs(grad[2] + 2.0 / 3.0) < 1e-6,
        "ppo grad %g %g %g", grad[0], grad[1], grad[2]);
  CHECK(result.masked_tokens == 3 && result.non_finite == 0, "ppo counts");

  options.clip_low = 1.5;
  s = tirl_ppo_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL, &options, grad,
                    &result, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT, "clip_low 1.5 accepted");
  CHECK(strstr(tirl_last_error(), "clip_low") != NULL, "message: %s", tirl_last_error());
  options = tirl_ppo_options_default();
  options.aggregation = TIRL_AGG_SEQ_MEAN_TOKEN_MEAN;
  s = tirl_ppo_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL, &options, grad,
                    &result, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT, "seq aggregation without offsets accepted");
  CHECK(strstr(tirl_last_error(), "seq_offsets") != NULL, "message: %s", tirl_last_error());
}

static void test_policy_loss(void) {
  /* tirl_policy_loss equals tirl_ppo_loss for 'vanilla'; 'gpg' is -logp * A, gradient -A
   * (verl core_algos.py at 1dda039b); a wrong struct_size is refused. */
  const float logp[3] = {-1.0f, -2.0f, -0.5f};
  const float old_logp[3] = {-1.1f, -1.5f, -0.5f};
  const float advantages[3] = {1.0f, -1.0f, 2.0f};
  const uint8_t mask[3] = {1, 1, 1};
  float grad[3], grad_ppo[3];
  tirl_ppo_result ppo;
  tirl_ppo_options ppo_options = tirl_ppo_options_default();
  CHECK(tirl_ppo_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL, &ppo_options,
                      grad_ppo, &ppo, tirl_cpu()) == TIRL_OK, "ppo_loss: %s", tirl_last_error());
  tirl_policy_loss_options options = tirl_policy_loss_options_default();
  tirl_policy_loss_result result;
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  tirl_status s = tirl_policy_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL,
                                   &options, grad, &result, tirl_cpu());
  CHECK(s == TIRL_OK, "policy_loss vanilla: %s", tirl_last_error());
  CHECK(result.ppo.loss == ppo.loss && memcmp(grad, grad_ppo, sizeof grad) == 0,
        "vanilla policy_loss %.9g != ppo_loss %.9g", result.ppo.loss, ppo.loss);
  options.policy_loss = TIRL_POLICY_GPG;
  s = tirl_policy_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL, &options, grad,
                       &result, tirl_cpu());
  CHECK(s == TIRL_OK, "policy_loss gpg: %s", tirl_last_error());
  CHECK(fabs(result.ppo.loss - (1.0 - 2.0 + 1.0) / 3.0) < 1e-6, "gpg loss %.9g", result.ppo.loss);
  CHECK(fabs(grad[0] + 1.0 / 3) < 1e-6 && fabs(grad[1] - 1.0 / 3) < 1e-6 &&
            fabs(grad[2] + 2.0 / 3) < 1e-6,
        "gpg grad %g %g %g", grad[0], grad[1], grad[2]);
  options.policy_loss = TIRL_POLICY_DRO;
  s = tirl_policy_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL, &options, grad,
                       &result, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "dro_beta") != NULL,
        "dro without dro_beta: %s", tirl_last_error());
  options = tirl_policy_loss_options_default();
  options.struct_size -= 8;
  s = tirl_policy_loss(logp, old_logp, advantages, mask, 3, NULL, 0, NULL, NULL, &options, grad,
                       &result, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "struct_size") != NULL,
        "wrong struct_size: %s", tirl_last_error());
}

static void test_errors(void) {
  const uint8_t roles[3] = {0, 7, 1};
  const int32_t offsets[2] = {0, 3};
  const int32_t bad_offsets[2] = {0, 2};
  uint8_t mask[3];
  tirl_status s = tirl_feedback_mask(roles, 3, offsets, 1, NULL, mask, NULL, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT, "bad role accepted");
  CHECK(strstr(tirl_last_error(), "roles[1] = 7") != NULL, "message: %s", tirl_last_error());
  s = tirl_feedback_mask(roles, 3, bad_offsets, 1, NULL, mask, NULL, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT, "bad offsets accepted");
  CHECK(strstr(tirl_last_error(), "seq_offsets") != NULL, "message: %s", tirl_last_error());
  CHECK(tirl_set_num_threads(0) == TIRL_ERROR_INVALID_ARGUMENT, "0 threads accepted");
}

static void test_token_logprobs(void) {
  /* Two equal logits: p = 1/2 each, so lp = -ln 2, H = ln 2 and dL/dlogits = (1/2, -1/2). */
  const float logits[4] = {0.0f, 0.0f, 1.0f, 1.0f};
  const uint16_t logits_bf16[4] = {0, 0, 0x3f80, 0x3f80}; /* 0, 0, 1, 1 */
  const int32_t labels[2] = {0, 1};
  const int32_t bad_labels[2] = {0, 2};
  const float grad_logp[2] = {1.0f, 1.0f};
  float logp[2], entropy[2], grad[4];
  tirl_status s = tirl_token_logprobs(logits, TIRL_DTYPE_F32, 2, 2, labels, 1.0, logp, entropy,
                                      tirl_cpu());
  CHECK(s == TIRL_OK, "token_logprobs: %s", tirl_last_error());
  CHECK(fabsf(logp[0] + 0.6931472f) < 1e-6f && fabsf(entropy[1] - 0.6931472f) < 1e-6f,
        "token_logprobs values %g %g", logp[0], entropy[1]);
  s = tirl_token_logprobs(logits_bf16, TIRL_DTYPE_BF16, 2, 2, labels, 1.0, logp, NULL, tirl_cpu());
  CHECK(s == TIRL_OK && fabsf(logp[1] + 0.6931472f) < 1e-6f, "token_logprobs bf16 %g", logp[1]);
  s = tirl_token_logprobs_backward(logits, TIRL_DTYPE_F32, 2, 2, labels, 1.0, grad_logp, NULL,
                                   grad, tirl_cpu());
  CHECK(s == TIRL_OK && fabsf(grad[0] - 0.5f) < 1e-6f && fabsf(grad[3] - 0.5f) < 1e-6f,
        "token_logprobs_backward %g %g", grad[0], grad[3]);
  s = tirl_token_logprobs(logits, TIRL_DTYPE_F32, 2, 2, bad_labels, 1.0, logp, NULL, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "labels[1] = 2") != NULL,
        "bad label: %s", tirl_last_error());
}

static void test_threads_deterministic(void) {
  enum { N = 100000, B = 1000 };
  static uint8_t roles[N], mask1[N], mask2[N];
  static int32_t offsets[B + 1], counts1[B], counts2[B];
  for (int i = 0; i < N; ++i) roles[i] = (uint8_t)((i * 7919u) % 4u);
  for (int i = 0; i <= B; ++i) offsets[i] = i * (N / B);
  CHECK(tirl_set_num_threads(1) == TIRL_OK, "set 1 thread");
  tirl_feedback_mask(roles, N, offsets, B, NULL, mask1, counts1, tirl_cpu());
  CHECK(tirl_set_num_threads(4) == TIRL_OK, "set 4 threads");
  tirl_feedback_mask(roles, N, offsets, B, NULL, mask2, counts2, tirl_cpu());
  CHECK(memcmp(mask1, mask2, N) == 0 && memcmp(counts1, counts2, sizeof counts1) == 0,
        "results differ between 1 and 4 threads");
}

/* With a GPU: feedbackMask on device memory equals the CPU result. Without one: CUDA
 * calls fail with TIRL_ERROR_UNSUPPORTED and the reason, and nothing crashes. */
static void test_cuda(void) {
  const uint8_t roles[8] = {0, 0, 1, 2, 1, 0, 1, 3};
  const int32_t offsets[3] = {0, 5, 8};
  const uint8_t expected[8] = {0, 0, 1, 0, 1, 0, 1, 0};
  tirl_device gpu = {TIRL_DEVICE_CUDA, 0, NULL};
  if (!tirl_cuda_available()) {
    uint8_t mask[8];
    void* pointer = (void*)1;
    printf("CUDA unavailable: %s\n", tirl_cuda_status());
    CHECK(strlen(tirl_cuda_status()) > 0, "no reason given for CUDA being unavailable");
    CHECK(tirl_feedback_mask(roles, 8, offsets, 2, NULL, mask, NULL, gpu) == TIRL_ERROR_UNSUPPORTED,
          "CUDA call without CUDA did not fail with TIRL_ERROR_UNSUPPORTED");
    CHECK(strstr(tirl_last_error(), tirl_cuda_status()) != NULL, "message: %s", tirl_last_error());
    CHECK(tirl_cuda_malloc(gpu, 16, &pointer) == TIRL_ERROR_UNSUPPORTED && pointer == NULL,
          "tirl_cuda_malloc without CUDA");
    return;
  }
  {
    void *d_roles = NULL, *d_offsets = NULL, *d_mask = NULL, *d_counts = NULL;
    uint8_t mask[8];
    int32_t counts[2];
    CHECK(tirl_cuda_malloc(gpu, 8, &d_roles) == TIRL_OK, "malloc: %s", tirl_last_error());
    CHECK(tirl_cuda_malloc(gpu, sizeof offsets, &d_offsets) == TIRL_OK, "malloc offsets");
    CHECK(tirl_cuda_malloc(gpu, 8, &d_mask) == TIRL_OK, "malloc mask");
    CHECK(tirl_cuda_malloc(gpu, sizeof counts, &d_counts) == TIRL_OK, "malloc counts");
    tirl_cuda_memcpy_h2d(gpu, d_roles, roles, 8);
    tirl_cuda_memcpy_h2d(gpu, d_offsets, offsets, sizeof offsets);
    CHECK(tirl_feedback_mask(d_roles, 8, d_offsets, 2, NULL, d_mask, d_counts, gpu) == TIRL_OK,
          "feedback_mask on CUDA: %s", tirl_last_error());
    tirl_cuda_memcpy_d2h(gpu, mask, d_mask, 8);
    tirl_cuda_memcpy_d2h(gpu, counts, d_counts, sizeof counts);
    CHECK(memcmp(mask, expected, 8) == 0, "CUDA mask differs");
    CHECK(counts[0] == 2 && counts[1] == 1, "CUDA counts %d %d", counts[0], counts[1]);
    tirl_cuda_free(gpu, d_roles);
    tirl_cuda_free(gpu, d_offsets);
    tirl_cuda_free(gpu, d_mask);
    tirl_cuda_free(gpu, d_counts);
  }
}

static void test_group_advantages(void) {
  /* One group [1, 0, 0, 1]: mean 0.5, unbiased std 0.57735, so +-0.866. */
  const float rewards[4] = {1, 0, 0, 1};
  const int32_t ids[4] = {-3, -3, -3, -3};
  float advantages[4];
  tirl_group_advantages_options options = tirl_group_advantages_options_default();
  options.epsilon = 0;
  tirl_status s = tirl_group_advantages(rewards, 4, NULL, 4, &options, advantages, tirl_cpu());
  CHECK(s == TIRL_OK, "group_advantages status %d: %s", (int)s, tirl_last_error());
  CHECK(fabsf(advantages[0] - 0.8660254f) < 1e-6f && fabsf(advantages[1] + 0.8660254f) < 1e-6f,
        "group_advantages %f %f", advantages[0], advantages[1]);
  s = tirl_group_advantages(rewards, 4, ids, 0, &options, advantages, tirl_cpu());
  CHECK(s == TIRL_OK && fabsf(advantages[3] - 0.8660254f) < 1e-6f, "group_advantages by id");
  s = tirl_group_advantages(rewards, 4, NULL, 3, &options, advantages, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT, "group size 3 of 4 accepted");
}

static void test_advantages(void) {
  /* RLOO over ids in any order: group 7 = {1, 0, 1} gives 3/2 (s - 2/3); group 2 is alone
   * and keeps its score (verl's 'rloo'). One token per sequence, the second masked out. */
  const float rewards[4] = {1, 4, 0, 1};
  const int32_t ids[4] = {7, 2, 7, 7};
  const uint8_t mask[5] = {1, 1, 1, 0, 1};
  const int32_t offsets[5] = {0, 1, 2, 4, 5};
  float advantages[5], returns[5];
  tirl_advantages_inputs in;
  memset(&in, 0, sizeof in);
  in.rewards = rewards;
  in.mask = mask;
  in.seq_offsets = offsets;
  in.group_ids = ids;
  tirl_advantages_options options = tirl_advantages_options_default();
  options.estimator = TIRL_ADV_RLOO;
  tirl_status s = tirl_advantages(&in, 5, 4, &options, advantages, returns, tirl_cpu());
  CHECK(s == TIRL_OK, "advantages status %d: %s", (int)s, tirl_last_error());
  CHECK(fabsf(advantages[0] - 0.5f) < 1e-6f && advantages[1] == 4.0f && fabsf(advantages[2] + 1.0f) < 1e-6f &&
            advantages[3] == 0.0f && fabsf(advantages[4] - 0.5f) < 1e-6f && returns[4] == advantages[4],
        "rloo %f %f %f %f %f", advantages[0], advantages[1], advantages[2], advantages[3], advantages[4]);
  /* An array the estimator does not read, a missing one, and an unknown estimator. */
  const float values[5] = {0, 0, 0, 0, 0};
  in.values = values;
  CHECK(tirl_advantages(&in, 5, 4, &options, advantages, NULL, tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT &&
            strstr(tirl_last_error(), "values") != NULL,
        "values accepted by rloo: %s", tirl_last_error());
  in.values = NULL;
  options.estimator = TIRL_ADV_GAE;
  in.group_ids = NULL;
  CHECK(tirl_advantages(&in, 5, 4, &options, advantages, NULL, tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT &&
            strstr(tirl_last_error(), "values") != NULL,
        "gae without values: %s", tirl_last_error());
  options.estimator = (tirl_advantage_estimator)12;
  CHECK(tirl_advantages(&in, 5, 4, &options, advantages, NULL, tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT,
        "estimator 12 accepted");
  CHECK(tirl_advantages(NULL, 5, 4, &options, advantages, NULL, tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT,
        "NULL inputs accepted");
}

static void test_dpo_loss(void) {
  /* Margin 0: sigmoid DPO loss log 2, gradient -beta / 2 per pair (mean over 2 pairs). */
  const float zeros[2] = {0, 0};
  float grad_chosen[2];
  tirl_dpo_result result;
  tirl_dpo_options options = tirl_dpo_options_default();
  tirl_status s = tirl_dpo_loss(zeros, zeros, zeros, zeros, 2, &options, grad_chosen, NULL, NULL,
                                NULL, &result, tirl_cpu());
  CHECK(s == TIRL_OK, "dpo_loss status %d: %s", (int)s, tirl_last_error());
  CHECK(fabs(result.loss - 0.69314718) < 1e-6, "dpo loss %f", result.loss);
  CHECK(fabsf(grad_chosen[0] + 0.025f) < 1e-7f, "dpo grad %f", grad_chosen[0]);
  options.beta = 0;
  s = tirl_dpo_loss(zeros, zeros, zeros, zeros, 2, &options, NULL, NULL, NULL, NULL, &result,
                    tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT, "beta 0 accepted");
}

static void test_sequence_logprobs(void) {
  const float logp[5] = {-1, -2, -3, -4, -5};
  const uint8_t mask[5] = {1, 0, 1, 1, 1};
  const int32_t offsets[4] = {0, 3, 3, 5};
  const float grad_seq[3] = {1, 7, 2};
  float sums[3], grad[5];
  tirl_status s = tirl_sequence_logprobs(logp, mask, 5, offsets, 3, 1, sums, tirl_cpu());
  CHECK(s == TIRL_OK, "sequence_logprobs status %d: %s", (int)s, tirl_last_error());
  CHECK(sums[0] == -2.0f && sums[1] == 0.0f && sums[2] == -4.5f, "sequence means %f %f %f",
        sums[0], sums[1], sums[2]);
  s = tirl_sequence_logprobs_backward(grad_seq, mask, 5, offsets, 3, 1, grad, tirl_cpu());
  CHECK(s == TIRL_OK && grad[0] == 0.5f && grad[1] == 0.0f && grad[4] == 1.0f,
        "sequence_logprobs_backward %f %f %f", grad[0], grad[1], grad[4]);
}

/* A C caller may store any int in an enum field or argument: each op refuses one outside
 * the enum (found by native/fuzz; in C++ such a value was undefined behaviour). */
static void test_enum_values_out_of_range(void) {
  const float logp[2] = {-1.0f, -2.0f};
  const uint8_t mask[2] = {1, 1};
  const int32_t labels[1] = {0};
  const int bad[3] = {-1, 99, 0x7fffffff};
  float out[2];
  tirl_ppo_result ppo;
  tirl_dpo_result dpo;
  int i;
  for (i = 0; i < 3; ++i) {
    tirl_ppo_options options = tirl_ppo_options_default();
    tirl_dpo_options dpo_options = tirl_dpo_options_default();
    tirl_device device = tirl_cpu();
    options.aggregation = (tirl_aggregation)bad[i];
    CHECK(tirl_ppo_loss(logp, logp, logp, mask, 2, NULL, 0, NULL, NULL, &options, NULL, &ppo,
                        tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT &&
              strstr(tirl_last_error(), "aggregation") != NULL,
          "aggregation %d: %s", bad[i], tirl_last_error());
    options = tirl_ppo_options_default();
    options.kl_estimator = (tirl_kl_estimator)bad[i];
    CHECK(tirl_ppo_loss(logp, logp, logp, mask, 2, NULL, 0, NULL, NULL, &options, NULL, &ppo,
                        tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT,
          "kl_estimator %d accepted", bad[i]);
    options = tirl_ppo_options_default();
    options.ratio_level = (tirl_ratio_level)bad[i];
    CHECK(tirl_ppo_loss(logp, logp, logp, mask, 2, NULL, 0, NULL, NULL, &options, NULL, &ppo,
                        tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT,
          "ratio_level %d accepted", bad[i]);
    dpo_options.variant = (tirl_dpo_variant)bad[i];
    CHECK(tirl_dpo_loss(logp, logp, logp, logp, 2, &dpo_options, NULL, NULL, NULL, NULL, &dpo,
                        tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT,
          "dpo variant %d accepted", bad[i]);
    CHECK(tirl_token_logprobs(logp, (tirl_dtype)bad[i], 1, 2, labels, 1.0, out, NULL,
                              tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT &&
              strstr(tirl_last_error(), "dtype") != NULL,
          "dtype %d: %s", bad[i], tirl_last_error());
    device.type = (tirl_device_type)bad[i];
    CHECK(tirl_sequence_logprobs(logp, mask, 2, NULL, 0, 0, out, device) ==
              TIRL_ERROR_INVALID_ARGUMENT,
          "device type %d accepted", bad[i]);
  }
}

/* No tokens: any vocabulary size is a valid empty call, the largest included (found by
 * native/fuzz: the block count of a row overflowed). */
static void test_empty_batch_huge_vocabulary(void) {
  const int64_t vocab_size = INT64_MAX;
  float logits[1], grad[1];
  CHECK(tirl_token_logprobs(logits, TIRL_DTYPE_F32, 0, vocab_size, NULL, 1.0, NULL, NULL,
                            tirl_cpu()) == TIRL_OK,
        "empty tokenLogprobs: %s", tirl_last_error());
  CHECK(tirl_token_logprobs_backward(logits, TIRL_DTYPE_F32, 0, vocab_size, NULL, 1.0, NULL, NULL,
                                     grad, tirl_cpu()) == TIRL_OK,
        "empty tokenLogprobsBackward: %s", tirl_last_error());
}

/* A size whose byte count overflows 64 bits has no buffer: refused before any access
 * (found by native/fuzz: groupAdvantages sized its work from such a count). */
static void test_sizes_past_64_bit_bytes(void) {
  const int64_t sizes[2] = {INT64_MAX / 4 + 1, INT64_MAX};
  float one[1] = {0};
  uint8_t mask[1] = {1};
  const int32_t offsets[1] = {0};
  tirl_group_advantages_options options = tirl_group_advantages_options_default();
  tirl_dpo_options dpo_options = tirl_dpo_options_default();
  tirl_dpo_result dpo;
  int i;
  for (i = 0; i < 2; ++i) {
    CHECK(tirl_group_advantages(one, sizes[i], NULL, 1, &options, one, tirl_cpu()) ==
              TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "num_rewards") != NULL,
          "num_rewards %lld: %s", (long long)sizes[i], tirl_last_error());
    CHECK(tirl_dpo_loss(one, one, one, one, sizes[i], &dpo_options, NULL, NULL, NULL, NULL, &dpo,
                        tirl_cpu()) == TIRL_ERROR_INVALID_ARGUMENT,
          "num_pairs %lld: %s", (long long)sizes[i], tirl_last_error());
    CHECK(tirl_sequence_logprobs(one, mask, 0, offsets, sizes[i], 0, one, tirl_cpu()) ==
              TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "num_seqs") != NULL,
          "num_seqs %lld: %s", (long long)sizes[i], tirl_last_error());
  }
}

/* Two sequences, d = logp - rollout_logp = [0, ln 3, -ln 2 | 1.5 (masked out: 9)]. */
static void test_rollout_correction(void) {
  const float logp[5] = {-1, -1, -1, -1, -1};
  const float rollout[5] = {-1, (float)(-1 - log(3.0)), (float)(-1 + log(2.0)), -2.5f, -10};
  const uint8_t mask[5] = {1, 1, 1, 1, 0};
  const int32_t offsets[3] = {0, 3, 5};
  float weights[5];
  uint8_t kept[5];
  tirl_rollout_correction_result r;
  tirl_rollout_correction_options o = tirl_rollout_correction_options_default();
  CHECK(o.rollout_is == TIRL_ROLLOUT_IS_SEQUENCE && o.rollout_is_threshold == 2.0 && o.rollout_rs == 0,
        "rollout_correction defaults");
  o.rollout_is = TIRL_ROLLOUT_IS_TOKEN;
  o.rollout_rs = 1u << TIRL_ROLLOUT_RS_TOKEN_K1 | 1u << TIRL_ROLLOUT_RS_SEQ_MAX_K2;
  o.rollout_rs_threshold[TIRL_ROLLOUT_RS_TOKEN_K1] = 2.5;  /* ratio 1/3 is below 1/2.5 */
  o.rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MAX_K2] = 0.7; /* max k2: 0.60 | 1.125 */
  tirl_status s = tirl_rollout_correction(logp, rollout, mask, 5, offsets, 2, &o, weights, kept, &r,
                                          tirl_cpu());
  CHECK(s == TIRL_OK, "rollout_correction: %s", tirl_last_error());
  const float expected_weights[5] = {1, 2, 0.5f, 2, 0};
  const uint8_t expected_kept[5] = {1, 0, 1, 0, 0};
  for (int t = 0; t < 5; ++t) {
    CHECK(fabsf(weights[t] - expected_weights[t]) < 1e-6f, "weights[%d] = %g", t, weights[t]);
  }
  CHECK(memcmp(kept, expected_kept, 5) == 0, "rollout_correction mask");
  CHECK(r.masked_tokens == 4 && r.valid_seqs == 2 && r.non_finite == 0, "rollout_correction counts");
  CHECK(fabs(r.rollout_rs_masked_fraction - 0.5) < 1e-12, "rollout_rs_masked_fraction %g",
        r.rollout_rs_masked_fraction);
  CHECK(fabs(r.rollout_rs[TIRL_ROLLOUT_RS_SEQ_MAX_K2].seq_max - 1.125) < 1e-9, "seq_max_k2 seq_max");
  CHECK(fabs(r.kl - (log(2.0) - log(3.0) - 1.5) / 4) < 1e-7, "kl %g", r.kl);
  /* The mask in place gives the same. */
  uint8_t in_place[5];
  memcpy(in_place, mask, 5);
  s = tirl_rollout_correction(logp, rollout, in_place, 5, offsets, 2, &o, weights, in_place, &r,
                              tirl_cpu());
  CHECK(s == TIRL_OK && memcmp(in_place, expected_kept, 5) == 0, "rollout_correction in place");
  /* A rejection option without its threshold is refused by name. */
  o.rollout_rs |= 1u << TIRL_ROLLOUT_RS_SEQ_MEAN_K3;
  s = tirl_rollout_correction(logp, rollout, mask, 5, offsets, 2, &o, weights, kept, &r, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MEAN_K3]") != NULL,
        "missing threshold: %s", tirl_last_error());
}

int main(void) {
  printf("tirl %s, %d threads, simd %s\n", tirl_version(), (int)tirl_num_threads(), tirl_simd_level());
  test_feedback_mask();
  test_ppo_loss();
  test_policy_loss();
  test_errors();
  test_token_logprobs();
  test_threads_deterministic();
  test_cuda();
  test_group_advantages();
  test_advantages();
  test_dpo_loss();
  test_sequence_logprobs();
  test_rollout_correction();
  test_enum_values_out_of_range();
  test_empty_batch_huge_vocabulary();
  test_sizes_past_64_bit_bytes();
  if (failures == 0) printf("c_abi: all checks passed\n");
  return failures == 0 ? 0 : 1;
}

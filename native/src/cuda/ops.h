// The CUDA implementations the backend table points at; one per op file, each with the
// signature of its C ABI function (pointers are device pointers).
#pragma once

#include "tirl/tirl.h"

namespace tirl::cuda {

tirl_status feedback_mask(const uint8_t* roles, int64_t num_tokens, const int32_t* seq_offsets,
                          int64_t num_seqs, const uint8_t* keep, uint8_t* mask,
                          int32_t* action_tokens, tirl_device device);

tirl_status token_logprobs(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                           int64_t vocab_size, const int32_t* labels, double temperature,
                           float* logp, float* entropy, tirl_device device);

tirl_status token_logprobs_backward(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                                    int64_t vocab_size, const int32_t* labels, double temperature,
                                    const float* grad_logp, const float* grad_entropy,
                                    float* grad_logits, tirl_device device);

tirl_status sequence_logprobs(const float* logp, const uint8_t* mask, int64_t num_tokens,
                              const int32_t* seq_offsets, int64_t num_seqs, int32_t average,
                              float* out, tirl_device device);

tirl_status sequence_logprobs_backward(const float* grad_seq, const uint8_t* mask,
                                       int64_t num_tokens, const int32_t* seq_offsets,
                                       int64_t num_seqs, int32_t average, float* grad_logp,
                                       tirl_device device);

tirl_status dpo_loss(const float* policy_chosen, const float* policy_rejected,
                     const float* ref_chosen, const float* ref_rejected, int64_t num_pairs,
                     const tirl_dpo_options* options, float* grad_chosen, float* grad_rejected,
                     float* chosen_rewards, float* rejected_rewards, tirl_dpo_result* result,
                     tirl_device device);

tirl_status ppo_loss(const float* logp, const float* old_logp, const float* advantages,
                     const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                     int64_t num_seqs, const float* ref_logp, const float* weights,
                     const tirl_ppo_options* options, float* grad, tirl_ppo_result* result,
                     tirl_device device);

tirl_status group_advantages(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                             int64_t group_size, const tirl_group_advantages_options* options,
                             float* advantages, tirl_device device);

tirl_status advantages(const tirl_advantages_inputs* inputs, int64_t num_tokens, int64_t num_seqs,
                       const tirl_advantages_options* options, float* advantages, float* returns,
                       tirl_device device);

}  // namespace tirl::cuda

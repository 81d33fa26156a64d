// The table of entry points libtirl_cuda.so hands to the core. The core and the CUDA
// library are built together from one tree, so the table is versioned only to refuse a
// stale library left beside a newer core: change TIRL_CUDA_BACKEND_VERSION whenever the
// struct changes. Pointer arguments of the ops are device pointers; each op entry has the
// exact signature of its C ABI function and is called only after the core's host-side
// checks (counts, null pointers, option ranges) passed.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "tirl/tirl.h"

#define TIRL_CUDA_BACKEND_VERSION 1
#define TIRL_CUDA_BACKEND_SYMBOL "tirl_cuda_backend_v1"
#define TIRL_CUDA_LIBRARY_NAME "libtirl_cuda.so"

extern "C" {

typedef enum tirl_copy_direction {
  TIRL_COPY_HOST_TO_DEVICE = 0,
  TIRL_COPY_DEVICE_TO_HOST = 1
} tirl_copy_direction;

typedef struct tirl_cuda_backend {
  uint32_t version;  // TIRL_CUDA_BACKEND_VERSION
  uint32_t size;     // sizeof(tirl_cuda_backend)

  // Message of the last failed backend call on this thread.
  const char* (*last_error)(void);
  // Devices the driver reports; a failure's message says why (no driver, a CUDA error).
  tirl_status (*device_count)(int32_t* count);

  tirl_status (*malloc)(tirl_device device, size_t bytes, void** pointer);
  tirl_status (*free)(tirl_device device, void* pointer);
  tirl_status (*memcpy)(tirl_device device, void* destination, const void* source, size_t bytes,
                        tirl_copy_direction direction);
  tirl_status (*synchronize)(tirl_device device);

  tirl_status (*feedback_mask)(const uint8_t* roles, int64_t num_tokens,
                               const int32_t* seq_offsets, int64_t num_seqs, const uint8_t* keep,
                               uint8_t* mask, int32_t* action_tokens, tirl_device device);
  tirl_status (*group_advantages)(const float* rewards, int64_t num_rewards,
                                  const int32_t* group_ids, int64_t group_size,
                                  const tirl_group_advantages_options* options, float* advantages,
                                  tirl_device device);
  tirl_status (*dpo_loss)(const float* policy_chosen, const float* policy_rejected,
                          const float* ref_chosen, const float* ref_rejected, int64_t num_pairs,
                          const tirl_dpo_options* options, float* grad_chosen,
                          float* grad_rejected, float* chosen_rewards, float* rejected_rewards,
                          tirl_dpo_result* result, tirl_device device);
  tirl_status (*sequence_logprobs)(const float* logp, const uint8_t* mask, int64_t num_tokens,
                                   const int32_t* seq_offsets, int64_t num_seqs, int32_t average,
                                   float* out, tirl_device device);
  tirl_status (*sequence_logprobs_backward)(const float* grad_seq, const uint8_t* mask,
                                            int64_t num_tokens, const int32_t* seq_offsets,
                                            int64_t num_seqs, int32_t average, float* grad_logp,
                                            tirl_device device);
  tirl_status (*ppo_loss)(const float* logp, const float* old_logp, const float* advantages,
                          const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                          int64_t num_seqs, const float* ref_logp, const float* weights,
                          const tirl_ppo_options* options, float* grad, tirl_ppo_result* result,
                          tirl_device device);
  tirl_status (*token_logprobs)(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                                int64_t vocab_size, const int32_t* labels, double temperature,
                                float* logp, float* entropy, tirl_device device);
  tirl_status (*token_logprobs_backward)(const void* logits, tirl_dtype dtype,
                                         int64_t num_tokens, int64_t vocab_size,
                                         const int32_t* labels, double temperature,
                                         const float* grad_logp, const float* grad_entropy,
                                         float* grad_logits, tirl_device device);
  tirl_status (*advantages)(const tirl_advantages_inputs* inputs, int64_t num_tokens,
                            int64_t num_seqs, const tirl_advantages_options* options,
                            float* advantages, float* returns, tirl_device device);
} tirl_cuda_backend;

typedef const tirl_cuda_backend* (*tirl_cuda_backend_entry)(void);

}  // extern "C"

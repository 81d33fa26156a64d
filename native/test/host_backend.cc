// A stand-in for libtirl_cuda.so that keeps "device" memory on the host and runs every op
// on the CPU kernels (through libtirl's C ABI, with the CPU device). Loaded through
// TIRL_CUDA_LIBRARY by test/cuda_emulated.test.ts, it lets machines without a GPU test
// everything between JavaScript and the CUDA library: device arrays, the bindings'
// device paths, and the core's forwarding of CUDA devices. Never shipped (it is built
// outside the addon's directory).
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/cuda_backend.h"

namespace {

thread_local std::string last_message;

const char* last_error() { return last_message.c_str(); }

// The emulated device: one, ordinal 0.
tirl_status check_device(tirl_device device, const char* op) {
  if (device.type == TIRL_DEVICE_CUDA && device.index == 0) return TIRL_OK;
  last_message = std::string(op) + ": the host emulation has only device 0";
  return TIRL_ERROR_INVALID_ARGUMENT;
}

// Runs a CPU kernel and carries its message over as this backend's.
tirl_status carry(tirl_status status) {
  last_message = status == TIRL_OK ? "" : tirl_last_error();
  return status;
}

tirl_status device_count(int32_t* count) {
  *count = 1;
  return TIRL_OK;
}

tirl_status allocate(tirl_device device, size_t bytes, void** pointer) {
  if (tirl_status s = check_device(device, "tirl_cuda_malloc")) return s;
  *pointer = bytes == 0 ? nullptr : std::calloc(bytes, 1);
  if (bytes != 0 && *pointer == nullptr) {
    last_message = "tirl_cuda_malloc: out of (emulated) device memory";
    return TIRL_ERROR_OUT_OF_MEMORY;
  }
  return TIRL_OK;
}

tirl_status release(tirl_device device, void* pointer) {
  if (tirl_status s = check_device(device, "tirl_cuda_free")) return s;
  std::free(pointer);
  return TIRL_OK;
}

tirl_status copy(tirl_device device, void* destination, const void* source, size_t bytes,
                 tirl_copy_direction) {
  if (tirl_status s = check_device(device, "tirl_cuda_memcpy")) return s;
  std::memcpy(destination, source, bytes);
  return TIRL_OK;
}

tirl_status synchronize(tirl_device device) { return check_device(device, "tirl_cuda_synchronize"); }

tirl_status feedback_mask(const uint8_t* roles, int64_t num_tokens, const int32_t* seq_offsets,
                          int64_t num_seqs, const uint8_t* keep, uint8_t* mask,
                          int32_t* action_tokens, tirl_device device) {
  if (tirl_status s = check_device(device, "feedbackMask")) return s;
  return carry(tirl_feedback_mask(roles, num_tokens, seq_offsets, num_seqs, keep, mask,
                                  action_tokens, tirl_cpu()));
}

tirl_status group_advantages(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                             int64_t group_size, const tirl_group_advantages_options* options,
                             float* advantages, tirl_device device) {
  if (tirl_status s = check_device(device, "groupAdvantages")) return s;
  return carry(tirl_group_advantages(rewards, num_rewards, group_ids, group_size, options,
                                     advantages, tirl_cpu()));
}

tirl_status dpo_loss(const float* policy_chosen, const float* policy_rejected,
                     const float* ref_chosen, const float* ref_rejected, int64_t num_pairs,
                     const tirl_dpo_options* options, float* grad_chosen, float* grad_rejected,
                     float* chosen_rewards, float* rejected_rewards, tirl_dpo_result* result,
                     tirl_device device) {
  if (tirl_status s = check_device(device, "dpoLoss")) return s;
  return carry(tirl_dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, num_pairs,
                             options, grad_chosen, grad_rejected, chosen_rewards,
                             rejected_rewards, result, tirl_cpu()));
}

tirl_status sequence_logprobs(const float* logp, const uint8_t* mask, int64_t num_tokens,
                              const int32_t* seq_offsets, int64_t num_seqs, int32_t average,
                              float* out, tirl_device device) {
  if (tirl_status s = check_device(device, "sequenceLogprobs")) return s;
  return carry(tirl_sequence_logprobs(logp, mask, num_tokens, seq_offsets, num_seqs, average, out,
                                      tirl_cpu()));
}

tirl_status sequence_logprobs_backward(const float* grad_seq, const uint8_t* mask,
                                       int64_t num_tokens, const int32_t* seq_offsets,
                                       int64_t num_seqs, int32_t average, float* grad_logp,
                                       tirl_device device) {
  if (tirl_status s = check_device(device, "sequenceLogprobsBackward")) return s;
  return carry(tirl_sequence_logprobs_backward(grad_seq, mask, num_tokens, seq_offsets, num_seqs,
                                               average, grad_logp, tirl_cpu()));
}

tirl_status ppo_loss(const float* logp, const float* old_logp, const float* advantages,
                     const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                     int64_t num_seqs, const float* ref_logp, const float* weights,
                     const tirl_ppo_options* options, float* grad, tirl_ppo_result* result,
                     tirl_device device) {
  if (tirl_status s = check_device(device, "ppoLoss")) return s;
  return carry(tirl_ppo_loss(logp, old_logp, advantages, mask, num_tokens, seq_offsets, num_seqs,
                             ref_logp, weights, options, grad, result, tirl_cpu()));
}

tirl_status token_logprobs(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                           int64_t vocab_size, const int32_t* labels, double temperature,
                           float* logp, float* entropy, tirl_device device) {
  if (tirl_status s = check_device(device, "tokenLogprobs")) return s;
  return carry(tirl_token_logprobs(logits, dtype, num_tokens, vocab_size, labels, temperature, logp,
                                   entropy, tirl_cpu()));
}

tirl_status token_logprobs_backward(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                                    int64_t vocab_size, const int32_t* labels, double temperature,
                                    const float* grad_logp, const float* grad_entropy,
                                    float* grad_logits, tirl_device device) {
  if (tirl_status s = check_device(device, "tokenLogprobsBackward")) return s;
  return carry(tirl_token_logprobs_backward(logits, dtype, num_tokens, vocab_size, labels,
                                            temperature, grad_logp, grad_entropy, grad_logits,
                                            tirl_cpu()));
}

// The inputs struct holds "device" pointers, which are host pointers here.
tirl_status advantages(const tirl_advantages_inputs* inputs, int64_t num_tokens, int64_t num_seqs,
                       const tirl_advantages_options* options, float* advantages_out,
                       float* returns, tirl_device device) {
  if (tirl_status s = check_device(device, "advantages")) return s;
  return carry(tirl_advantages(inputs, num_tokens, num_seqs, options, advantages_out, returns,
                               tirl_cpu()));
}

const tirl_cuda_backend kBackend = {
    TIRL_CUDA_BACKEND_VERSION,
    sizeof(tirl_cuda_backend),
    &last_error,
    &device_count,
    &allocate,
    &release,
    &copy,
    &synchronize,
    &feedback_mask,
    &group_advantages,
    &dpo_loss,
    &sequence_logprobs,
    &sequence_logprobs_backward,
    &ppo_loss,
    &token_logprobs,
    &token_logprobs_backward,
    &advantages,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const tirl_cuda_backend* tirl_cuda_backend_v1(void) {
  return &kBackend;
}

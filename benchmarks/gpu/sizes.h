// The benchmark shapes of the GPU checks (native/test/gpu/); benchmarks/peers/torch_peers.py
// repeats them for its GPU peers (keep in step).
#pragma once

#include <cstdint>

namespace tirl::gpu_check {

constexpr int64_t kPpoTokens = 1048576;          // ppoLoss, feedbackMask, sequenceLogprobs
constexpr int64_t kSequenceLength = 1024;        // 1024 sequences of 1024 tokens
constexpr int64_t kGroupRewards = 65536;         // groupAdvantages
constexpr int64_t kGroupSize = 16;
constexpr int64_t kDpoPairs = 65536;             // dpoLoss

struct LogitsShape {
  int64_t tokens;
  int64_t vocab;
};
constexpr LogitsShape kLogitsShapes[] = {{4096, 32000}, {1024, 151936}};

}  // namespace tirl::gpu_check

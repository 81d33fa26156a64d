#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "api/op_names.h"
#include "cpu/ops.h"
#include "math/feedback_mask.h"

#if TIRL_SIMD_X86
#include <immintrin.h>
#endif

namespace tirl::cpu {
namespace {

constexpr const char* kOp = op_name::feedback_mask;

// Work is cut by tokens, not by sequences, so one long sequence still uses every thread.
// A chunk owns the sequences that start inside it (the last chunk also those starting at
// num_tokens, which are empty); the action count of a sequence that crosses chunks is
// summed from per-chunk parts afterwards (integers: exact in any order).
constexpr int64_t kTokensPerChunk = 65536;
// Below this much work per thread a call stays on fewer threads (common/parallel.h). The
// op moves 2 B a token and is bound by memory bandwidth: on the quiet reference VM
// (`tirl bench --scaling-only`, 15 paired rounds, two runs) 2 threads vs 1 ran 1.28-1.39x
// at 1M tokens. At 128K a thread, 262,144 tokens ran 0.87-0.92x in four runs of
// benchmarks/ladder.ts on the EPYC VM of 2026-12-06, and 393,216 tokens 1.02-1.03x in
// three of four (0.75x in a loaded spell). (The earlier 1M a thread came from runs that
// saw 0.42-1.06x on a loaded or differently-placed VM.)
constexpr int64_t kMinTokensPerThread = 3 * kTokensPerChunk;

// The token loop, compiled once per SIMD path (common/simd.h).
#define TIRL_SIMD_KERNELS "cpu/feedback_mask_kernels.inc"
#include "common/simd_kernels.h"

tirl_status feedback_mask_cpu(const uint8_t* roles, int64_t num_tokens, const int32_t* seq_offsets,
                              int64_t num_seqs, const uint8_t* keep, uint8_t* mask,
                              int32_t* action_tokens) {
  const int64_t num_chunks = chunk_count(num_tokens, kTokensPerChunk);
  if (num_chunks == 0) {  // no tokens: every sequence is empty
    if (action_tokens != nullptr) std::fill(action_tokens, action_tokens + num_seqs, 0);
    return ok();
  }
  struct Spill {
    int32_t lead = 0;       // actions among its first tokens, when an earlier sequence owns them
    int64_t open_seq = -1;  // the owned sequence that runs past the chunk's end
    int32_t open_part = 0;  // that sequence's actions inside the chunk
    bool invalid = false;   // some role in the chunk is out of range
  };
  std::vector<Spill> spills(static_cast<size_t>(num_chunks));
  const auto mask_tokens = TIRL_SIMD_SELECT(mask_tokens);
  auto keep_sequence = [&](int64_t s) { return keep == nullptr || keep[s] != 0; };
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kTokensPerChunk;
    const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
    const bool last_chunk = chunk == num_chunks - 1;
    Spill& spill = spills[static_cast<size_t>(chunk)];
    int64_t s = std::lower_bound(seq_offsets, seq_offsets + num_seqs, first) - seq_offsets;
    const int64_t first_owned_start = s < num_seqs ? seq_offsets[s] : num_tokens;
    if (first < first_owned_start) {
      // s - 1 is the earlier sequence holding token `first`.
      spill.lead = mask_tokens(roles, first, std::min(first_owned_start, last),
                               keep_sequence(s - 1), mask, spill.invalid);
    }
    for (; s < num_seqs && (seq_offsets[s] < last || (last_chunk && seq_offsets[s] == last)); ++s) {
      const int64_t end = seq_offsets[s + 1];
      const int32_t count = mask_tokens(roles, seq_offsets[s], std::min(end, last),
                                        keep_sequence(s), mask, spill.invalid);
      if (end <= last) {
        if (action_tokens != nullptr) action_tokens[s] = count;
      } else {
        spill.open_seq = s;
        spill.open_part = count;
      }
    }
  };
  parallel_for(num_chunks, body, min_chunks(kMinTokensPerThread, kTokensPerChunk), Scaling::kMemory);

  int64_t open_seq = -1;
  int32_t open_total = 0;
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    const Spill& spill = spills[static_cast<size_t>(chunk)];
    if (open_seq >= 0) {
      open_total += spill.lead;
      if (seq_offsets[open_seq + 1] <= std::min(num_tokens, (chunk + 1) * kTokensPerChunk)) {
        if (action_tokens != nullptr) action_tokens[open_seq] = open_total;
        open_seq = -1;
      }
    }
    if (spill.open_seq >= 0) {
      open_seq = spill.open_seq;
      open_total = spill.open_part;
    }
  }
  // The first bad role: in the first chunk that has one (chunks are in token order).
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    if (!spills[static_cast<size_t>(chunk)].invalid) continue;
    // Bounded by the chunk and each role read once: a concurrent writer may have fixed the
    // bad role meanwhile (the chunk's last role is then reported).
    int64_t bad = chunk * kTokensPerChunk;
    const int64_t end = std::min(num_tokens, bad + kTokensPerChunk);
    uint8_t role = roles[bad];
    while (valid_role(role) && bad + 1 < end) role = roles[++bad];
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(kOp) + ": Expected roles in 0..3 (prompt, action, feedback, padding) "
                "but received roles[" + std::to_string(bad) + "] = " + std::to_string(role));
  }
  return ok();
}

}  // namespace

tirl_status feedback_mask(const uint8_t* roles, int64_t num_tokens, const int32_t* seq_offsets,
                          int64_t num_seqs, const uint8_t* keep, uint8_t* mask,
                          int32_t* action_tokens, tirl_device) {
  return feedback_mask_cpu(roles, num_tokens, seq_offsets, num_seqs, keep, mask, action_tokens);
}

}  // namespace tirl::cpu

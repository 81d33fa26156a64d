// Forward and backward side by side: the backward is the transpose of the forward's
// masked segment sum.
//
// Work is cut by tokens, not by sequences: a fixed number of tokens per chunk keeps the
// threads balanced even when one sequence holds most of the batch. A sequence that spans
// chunk boundaries is summed as per-chunk partials combined in chunk order afterwards,
// so the result depends only on the sizes, never on the thread count.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "cpu/ops.h"
#include "math/sequence_logprobs.h"

namespace tirl::cpu {
namespace {

constexpr int64_t kTokensPerChunk = 16384;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only`).
// The sums read 5 B/token; the backward only writes (4 B/token plus the mask). On the quiet
// reference VM (15 paired rounds, two runs) the backward ran 1.58-1.66x on 2 threads vs 1
// at 1M tokens and 1.00x at 128K, so it takes a second thread from 128K tokens a thread (an
// earlier 1M came from runs on a loaded machine, 0.84-0.94x).
constexpr int64_t kMinTokensPerThread = 262144;
constexpr int64_t kMinFilledPerThread = int64_t{1} << 17;

struct MaskedSum {
  double sum = 0.0;
  int64_t count = 0;

  void add(const MaskedSum& other) {
    sum += other.sum;
    count += other.count;
  }
};

// The token loops, compiled once per SIMD path (common/simd.h).
#define TIRL_SIMD_KERNELS "cpu/sequence_logprobs_kernels.inc"
#include "common/simd_kernels.h"

// Calls emit(s, masked sum of sequence s) exactly once for every sequence.
template <bool kWithValues, class Emit>
void for_each_sequence_sum(const float* logp, const uint8_t* mask, int64_t num_tokens,
                           const int32_t* seq_offsets, int64_t num_seqs, Emit emit) {
  const int64_t num_chunks = chunk_count(num_tokens, kTokensPerChunk);
  if (num_chunks == 0) {
    for (int64_t s = 0; s < num_seqs; ++s) emit(s, MaskedSum{});
    return;
  }
  // A chunk owns the sequences that start inside it (the last chunk also those starting
  // at num_tokens, which are empty). What it cannot finish is left for the serial merge.
  struct Spill {
    MaskedSum lead;           // its first tokens, when they belong to an earlier sequence
    int64_t open_seq = -1;    // the owned sequence that runs past the chunk's end
    MaskedSum open_part;      // that sequence's tokens inside the chunk
  };
  std::vector<Spill> spills(static_cast<size_t>(num_chunks));
  const auto masked_sum = TIRL_SIMD_SELECT(masked_sum<kWithValues>);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kTokensPerChunk;
    const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
    const bool last_chunk = chunk == num_chunks - 1;
    int64_t s = std::lower_bound(seq_offsets, seq_offsets + num_seqs, first) - seq_offsets;
    const int64_t first_owned_start = s < num_seqs ? seq_offsets[s] : num_tokens;
    Spill& spill = spills[chunk];
    spill.lead = masked_sum(logp, mask, first, std::min(first_owned_start, last));
    for (; s < num_seqs && (seq_offsets[s] < last || (last_chunk && seq_offsets[s] == last)); ++s) {
      const int64_t start = seq_offsets[s];
      const int64_t end = seq_offsets[s + 1];
      if (end <= last) {
        emit(s, masked_sum(logp, mask, start, end));
      } else {
        spill.open_seq = s;
        spill.open_part = masked_sum(logp, mask, start, last);
      }
    }
  };
  parallel_for(num_chunks, body, min_chunks(kMinTokensPerThread, kTokensPerChunk), Scaling::kMemory);

  int64_t open_seq = -1;
  MaskedSum open_total;
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    if (open_seq >= 0) {
      open_total.add(spills[chunk].lead);
      if (seq_offsets[open_seq + 1] <= std::min(num_tokens, (chunk + 1) * kTokensPerChunk)) {
        emit(open_seq, open_total);
        open_seq = -1;
      }
    }
    if (spills[chunk].open_seq >= 0) {
      open_seq = spills[chunk].open_seq;
      open_total = spills[chunk].open_part;
    }
  }
}

}  // namespace

tirl_status sequence_logprobs(const float* logp, const uint8_t* mask, int64_t num_tokens,
                              const int32_t* seq_offsets, int64_t num_seqs, int32_t average,
                              float* out, tirl_device) {
  const bool mean = average != 0;
  for_each_sequence_sum<true>(logp, mask, num_tokens, seq_offsets, num_seqs,
                        [&](int64_t s, const MaskedSum& m) { out[s] = sequence_logprob(m.sum, m.count, mean); });
  return ok();
}

tirl_status sequence_logprobs_backward(const float* grad_seq, const uint8_t* mask,
                                       int64_t num_tokens, const int32_t* seq_offsets,
                                       int64_t num_seqs, int32_t average, float* grad_logp,
                                       tirl_device) {
  const bool mean = average != 0;
  // Averaging needs each sequence's masked count before its tokens are written.
  std::vector<int64_t> counts;
  if (mean) {
    counts.resize(static_cast<size_t>(num_seqs));
    for_each_sequence_sum<false>(nullptr, mask, num_tokens, seq_offsets, num_seqs,
                          [&](int64_t s, const MaskedSum& m) { counts[s] = m.count; });
  }
  const auto fill_masked = TIRL_SIMD_SELECT(fill_masked);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kTokensPerChunk;
    const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
    // The sequence holding token `first`: the last one starting at or before it.
    int64_t s = std::upper_bound(seq_offsets, seq_offsets + num_seqs + 1, first) - seq_offsets - 1;
    for (int64_t t = first; t < last; ++s) {
      const int64_t end = std::min<int64_t>(seq_offsets[s + 1], last);
      const float g = sequence_logprob_token_grad(grad_seq[s], mean ? counts[s] : 0, mean);
      fill_masked(grad_logp, mask, t, end, g);
      t = end;
    }
  };
  parallel_for(chunk_count(num_tokens, kTokensPerChunk), body,
               min_chunks(kMinFilledPerThread, kTokensPerChunk), Scaling::kMemory);
  return ok();
}

}  // namespace tirl::cpu

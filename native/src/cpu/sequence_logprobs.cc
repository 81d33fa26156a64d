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
#include <emmintrin.h>
#endif

#include "common/parallel.h"
#include "common/validate.h"
#include "math/sequence_logprobs.h"

namespace tirl {
namespace {

constexpr int64_t kTokensPerChunk = 16384;

struct MaskedSum {
  double sum = 0.0;
  int64_t count = 0;

  void add(const MaskedSum& other) {
    sum += other.sum;
    count += other.count;
  }
};

// Sum of logp over the masked tokens of [begin, end) and their count (kWithValues false:
// the count only, logp unused). Masked-out tokens are skipped (their bits cleared,
// branch-free), not multiplied by 0, so garbage (even NaN) there cannot leak in. Eight
// double accumulators in a fixed lane pattern (lane = position mod 8 from `begin`) keep
// the summation order fixed whether the SSE2 loop or the scalar loop adds a token.
template <bool kWithValues>
MaskedSum masked_sum(const float* logp, const uint8_t* mask, int64_t begin, int64_t end) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t count = 0;
  int64_t t = begin;
#if defined(__SSE2__)
  __m128d sum01 = _mm_setzero_pd(), sum23 = _mm_setzero_pd();
  __m128d sum45 = _mm_setzero_pd(), sum67 = _mm_setzero_pd();
  __m128i kept_count = _mm_setzero_si128();  // two 64-bit counters
  for (; t + 8 <= end; t += 8) {
    const __m128i dropped = _mm_cmpeq_epi8(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mask + t)), _mm_setzero_si128());
    // Sum of the kept flags (bytes 0/1) with SAD: no popcnt needed on baseline x86-64.
    kept_count = _mm_add_epi64(
        kept_count, _mm_sad_epu8(_mm_andnot_si128(dropped, _mm_set1_epi8(1)), _mm_setzero_si128()));
    if (kWithValues) {
      const __m128i dropped16 = _mm_unpacklo_epi8(dropped, dropped);
      const __m128 low = _mm_andnot_ps(
          _mm_castsi128_ps(_mm_unpacklo_epi16(dropped16, dropped16)), _mm_loadu_ps(logp + t));
      const __m128 high = _mm_andnot_ps(
          _mm_castsi128_ps(_mm_unpackhi_epi16(dropped16, dropped16)), _mm_loadu_ps(logp + t + 4));
      sum01 = _mm_add_pd(sum01, _mm_cvtps_pd(low));
      sum23 = _mm_add_pd(sum23, _mm_cvtps_pd(_mm_movehl_ps(low, low)));
      sum45 = _mm_add_pd(sum45, _mm_cvtps_pd(high));
      sum67 = _mm_add_pd(sum67, _mm_cvtps_pd(_mm_movehl_ps(high, high)));
    }
  }
  _mm_storeu_pd(lane + 0, sum01);
  _mm_storeu_pd(lane + 2, sum23);
  _mm_storeu_pd(lane + 4, sum45);
  _mm_storeu_pd(lane + 6, sum67);
  int64_t counts[2];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(counts), kept_count);
  count += counts[0] + counts[1];
#endif
  for (int k = static_cast<int>((t - begin) & 7); t < end; ++t, k = (k + 1) & 7) {
    const uint32_t keep = 0u - static_cast<uint32_t>(mask[t] != 0);
    count += keep & 1u;
    if (kWithValues) {
      uint32_t bits;
      std::memcpy(&bits, logp + t, sizeof bits);
      bits &= keep;
      float value;
      std::memcpy(&value, &bits, sizeof value);
      lane[k] += static_cast<double>(value);
    }
  }
  return {((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])),
          count};
}

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
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kTokensPerChunk;
    const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
    const bool last_chunk = chunk == num_chunks - 1;
    int64_t s = std::lower_bound(seq_offsets, seq_offsets + num_seqs, first) - seq_offsets;
    const int64_t first_owned_start = s < num_seqs ? seq_offsets[s] : num_tokens;
    Spill& spill = spills[chunk];
    spill.lead = masked_sum<kWithValues>(logp, mask, first, std::min(first_owned_start, last));
    for (; s < num_seqs && (seq_offsets[s] < last || (last_chunk && seq_offsets[s] == last)); ++s) {
      const int64_t start = seq_offsets[s];
      const int64_t end = seq_offsets[s + 1];
      if (end <= last) {
        emit(s, masked_sum<kWithValues>(logp, mask, start, end));
      } else {
        spill.open_seq = s;
        spill.open_part = masked_sum<kWithValues>(logp, mask, start, last);
      }
    }
  };
  parallel_for(num_chunks, body);

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

tirl_status check_common(const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                         int64_t num_seqs, const float* per_token, const char* per_token_name,
                         const float* per_seq, const char* per_seq_name, tirl_device device,
                         const char* op) {
  tirl_status s;
  if ((s = check_count(num_tokens, op, "num_tokens")) || (s = check_count(num_seqs, op, "num_seqs")) ||
      (s = check_pointer(mask, num_tokens, op, "mask")) ||
      (s = check_pointer(per_token, num_tokens, op, per_token_name)) ||
      (s = check_pointer(per_seq, num_seqs, op, per_seq_name)) ||
      (s = check_seq_offsets(seq_offsets, num_seqs, num_tokens, op)) ||
      (s = check_cpu_device(device, op))) {
    return s;
  }
  return TIRL_OK;
}

}  // namespace
}  // namespace tirl

extern "C" tirl_status tirl_sequence_logprobs(const float* logp, const uint8_t* mask,
                                              int64_t num_tokens, const int32_t* seq_offsets,
                                              int64_t num_seqs, int32_t average, float* out,
                                              tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    if (tirl_status s = check_common(mask, num_tokens, seq_offsets, num_seqs, logp, "logp", out,
                                     "out", device, "sequenceLogprobs")) {
      return s;
    }
    const bool mean = average != 0;
    for_each_sequence_sum<true>(logp, mask, num_tokens, seq_offsets, num_seqs,
                          [&](int64_t s, const MaskedSum& m) { out[s] = sequence_logprob(m.sum, m.count, mean); });
    return ok();
  });
}

extern "C" tirl_status tirl_sequence_logprobs_backward(const float* grad_seq, const uint8_t* mask,
                                                       int64_t num_tokens,
                                                       const int32_t* seq_offsets,
                                                       int64_t num_seqs, int32_t average,
                                                       float* grad_logp, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    if (tirl_status s = check_common(mask, num_tokens, seq_offsets, num_seqs, grad_logp,
                                     "grad_logp", grad_seq, "grad_seq", device,
                                     "sequenceLogprobsBackward")) {
      return s;
    }
    const bool mean = average != 0;
    // Averaging needs each sequence's masked count before its tokens are written.
    std::vector<int64_t> counts;
    if (mean) {
      counts.resize(static_cast<size_t>(num_seqs));
      for_each_sequence_sum<false>(nullptr, mask, num_tokens, seq_offsets, num_seqs,
                            [&](int64_t s, const MaskedSum& m) { counts[s] = m.count; });
    }
    auto body = [&](int64_t chunk) {
      const int64_t first = chunk * kTokensPerChunk;
      const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
      // The sequence holding token `first`: the last one starting at or before it.
      int64_t s = std::upper_bound(seq_offsets, seq_offsets + num_seqs + 1, first) - seq_offsets - 1;
      for (int64_t t = first; t < last; ++s) {
        const int64_t end = std::min<int64_t>(seq_offsets[s + 1], last);
        const float g = sequence_logprob_token_grad(grad_seq[s], mean ? counts[s] : 0, mean);
        for (; t < end; ++t) grad_logp[t] = mask[t] != 0 ? g : 0.0f;
      }
    };
    parallel_for(chunk_count(num_tokens, kTokensPerChunk), body);
    return ok();
  });
}

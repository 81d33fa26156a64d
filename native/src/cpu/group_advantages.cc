#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/parallel.h"
#include "common/validate.h"
#include "math/group_advantages.h"

namespace tirl {
namespace {

constexpr const char* kOp = "groupAdvantages";

// Contiguous groups are processed by the chunk in which they start; a chunk is a fixed
// range of rewards, so the work split depends only on the size.
constexpr int64_t kRewardsPerChunk = 4096;
// Scattered groups (arbitrary ids) are processed a fixed number of groups per chunk.
constexpr int64_t kGroupsPerChunk = 1024;

// Normalizes one group, whose members are rewards[member(k)] for k in [0, count) in input
// order. Sums run in double in that order, so the result does not depend on which thread
// runs the group.
template <class Member>
void normalize_group(const float* rewards, int64_t count, Member member, bool scale_by_std,
                     double epsilon, float* advantages) {
  double sum = 0.0;
  for (int64_t k = 0; k < count; ++k) sum += rewards[member(k)];
  const double mean = sum / static_cast<double>(count);
  double squared_deviations = 0.0;
  for (int64_t k = 0; k < count; ++k) {
    const double deviation = static_cast<double>(rewards[member(k)]) - mean;
    squared_deviations += deviation * deviation;
  }
  const GroupScale scale = group_scale(count, mean, squared_deviations, scale_by_std, epsilon);
  for (int64_t k = 0; k < count; ++k) {
    advantages[member(k)] = group_advantage(rewards[member(k)], scale);
  }
}

// Normalizes kBatch consecutive groups of `size` rewards side by side. Each group sees
// exactly the operations of normalize_group, in the same order (so the same bits); the
// interleaving only gives the CPU independent dependency chains to overlap, and with
// SSE2 two groups share one register of doubles.
constexpr int kBatch = 8;

#if defined(__SSE2__)
void normalize_group_batch(const float* rewards, int64_t size, bool scale_by_std, double epsilon,
                           float* advantages) {
  constexpr int kPairs = kBatch / 2;
  // Lane 0 of pair p is group 2p, lane 1 is group 2p + 1. Groups of up to kCachedSize
  // keep their rewards, widened to double, on the stack for the second and third pass.
  constexpr int64_t kCachedSize = 32;
  alignas(16) double cache[kCachedSize][kBatch];
  const bool cached = size <= kCachedSize;
  auto load_pair = [&](int p, int64_t k) {
    return _mm_set_pd(rewards[(2 * p + 1) * size + k], rewards[2 * p * size + k]);
  };
  auto reload_pair = [&](int p, int64_t k) {
    return cached ? _mm_load_pd(&cache[k][2 * p]) : load_pair(p, k);
  };
  __m128d sum[kPairs];
  for (int p = 0; p < kPairs; ++p) sum[p] = _mm_setzero_pd();
  for (int64_t k = 0; k < size; ++k) {
    for (int p = 0; p < kPairs; ++p) {
      const __m128d reward = load_pair(p, k);
      if (cached) _mm_store_pd(&cache[k][2 * p], reward);
      sum[p] = _mm_add_pd(sum[p], reward);
    }
  }
  const __m128d count = _mm_set1_pd(static_cast<double>(size));
  __m128d mean[kPairs], squared_deviations[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    mean[p] = _mm_div_pd(sum[p], count);
    squared_deviations[p] = _mm_setzero_pd();
  }
  for (int64_t k = 0; k < size; ++k) {
    for (int p = 0; p < kPairs; ++p) {
      const __m128d deviation = _mm_sub_pd(reload_pair(p, k), mean[p]);
      squared_deviations[p] = _mm_add_pd(squared_deviations[p], _mm_mul_pd(deviation, deviation));
    }
  }
  __m128d scale_mean[kPairs], scale_inverse[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    double means[2], deviations[2];
    _mm_storeu_pd(means, mean[p]);
    _mm_storeu_pd(deviations, squared_deviations[p]);
    const GroupScale low = group_scale(size, means[0], deviations[0], scale_by_std, epsilon);
    const GroupScale high = group_scale(size, means[1], deviations[1], scale_by_std, epsilon);
    scale_mean[p] = _mm_set_pd(high.mean, low.mean);
    scale_inverse[p] = _mm_set_pd(high.inverse_denominator, low.inverse_denominator);
  }
  for (int64_t k = 0; k < size; ++k) {
    for (int p = 0; p < kPairs; ++p) {
      // group_advantage, two groups at once.
      const __m128 advantage = _mm_cvtpd_ps(
          _mm_mul_pd(_mm_sub_pd(reload_pair(p, k), scale_mean[p]), scale_inverse[p]));
      _mm_store_ss(advantages + 2 * p * size + k, advantage);
      _mm_store_ss(advantages + (2 * p + 1) * size + k,
                   _mm_shuffle_ps(advantage, advantage, _MM_SHUFFLE(1, 1, 1, 1)));
    }
  }
}
#else
void normalize_group_batch(const float* rewards, int64_t size, bool scale_by_std, double epsilon,
                           float* advantages) {
  for (int g = 0; g < kBatch; ++g) {
    normalize_group(rewards + g * size, size, [](int64_t k) { return k; }, scale_by_std, epsilon,
                    advantages + g * size);
  }
}
#endif

// Groups that are contiguous runs: every `group_size` rewards, or runs of equal ids when
// the ids never decrease. Returns false (having written garbage) if `group_ids` turns out
// not to be sorted, so that the caller falls back to hashing; the check rides along with
// the work instead of costing a pass of its own.
bool normalize_runs(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                    int64_t group_size, bool scale_by_std, double epsilon, float* advantages) {
  const int64_t num_chunks = chunk_count(num_rewards, kRewardsPerChunk);
  std::vector<uint8_t> unsorted(static_cast<size_t>(num_chunks), 0);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kRewardsPerChunk;
    const int64_t last = std::min(num_rewards, first + kRewardsPerChunk);
    // The run of equal ids starting at `start` ends here. Every run boundary is checked
    // by the chunk owning the run before it: a decreasing id marks the chunk unsorted.
    auto group_end = [&](int64_t start) {
      if (group_ids == nullptr) return start + group_size;
      int64_t end = start + 1;
      while (end < num_rewards && group_ids[end] == group_ids[start]) ++end;
      if (end < num_rewards && group_ids[end] < group_ids[start]) unsorted[chunk] = 1;
      return end;
    };
    // The first group starting in [first, last); a group that started earlier belongs to
    // an earlier chunk.
    int64_t start = first;
    if (group_ids == nullptr) {
      start = (first + group_size - 1) / group_size * group_size;
    } else {
      while (start < last && start > 0 && group_ids[start] == group_ids[start - 1]) ++start;
    }
    while (start < last) {
      // kBatch groups of one size side by side when they all start in this chunk (the
      // common case: groups of n samples per prompt), else one group.
      const int64_t size = group_end(start) - start;
      if (unsorted[chunk]) return;
      int64_t batch_end = start + size;
      int batched = 1;
      while (batched < kBatch && batch_end < last && group_end(batch_end) - batch_end == size) {
        batch_end += size;
        ++batched;
      }
      if (unsorted[chunk]) return;
      if (batched == kBatch) {
        normalize_group_batch(rewards + start, size, scale_by_std, epsilon, advantages + start);
        start = batch_end;
      } else {
        normalize_group(rewards + start, size, [](int64_t k) { return k; }, scale_by_std, epsilon,
                        advantages + start);
        start += size;
      }
    }
  };
  parallel_for(num_chunks, body);
  return std::find(unsorted.begin(), unsorted.end(), 1) == unsorted.end();
}

// Numbers the groups of arbitrary ids densely: group_of[i] in [0, returned count), and
// group_start[g + 1] = the size of group g. Ids spanning a range of at most 2B values
// (e.g. prompt indices) are numbered id - min directly, which leaves empty groups;
// others by an open-addressing hash table, in order of first appearance.
int64_t number_groups(const int32_t* group_ids, int64_t num_rewards, int32_t* group_of,
                      std::vector<int32_t>& group_start) {
  int32_t low = group_ids[0], high = group_ids[0];
  for (int64_t i = 1; i < num_rewards; ++i) {
    low = std::min(low, group_ids[i]);
    high = std::max(high, group_ids[i]);
  }
  const int64_t range = static_cast<int64_t>(high) - low + 1;
  if (range <= 2 * num_rewards && range <= INT32_MAX) {
    group_start.assign(static_cast<size_t>(range) + 1, 0);
    for (int64_t i = 0; i < num_rewards; ++i) {
      group_of[i] = group_ids[i] - low;
      ++group_start[group_of[i] + 1];
    }
    return range;
  }
  // Linear probing, kept at most half full; it starts small and doubles, so it stays
  // cache-sized when there are far fewer groups than rewards.
  struct Slot {
    int32_t id;
    int32_t group;  // -1: empty
  };
  int bits = 10;
  std::vector<Slot> table(size_t{1} << bits, Slot{0, -1});
  auto slot_of = [&](int32_t id) {
    const uint64_t mask = (uint64_t{1} << bits) - 1;
    uint64_t slot = (static_cast<uint32_t>(id) * 0x9E3779B1u) >> (32 - bits);
    while (table[slot].group >= 0 && table[slot].id != id) slot = (slot + 1) & mask;
    return slot;
  };
  group_start.assign(1, 0);
  for (int64_t i = 0; i < num_rewards; ++i) {
    const int32_t id = group_ids[i];
    if (i > 0 && id == group_ids[i - 1]) {  // runs of equal ids are common: skip the probe
      group_of[i] = group_of[i - 1];
      ++group_start[group_of[i] + 1];
      continue;
    }
    uint64_t slot = slot_of(id);
    if (table[slot].group < 0) {
      const int32_t group = static_cast<int32_t>(group_start.size() - 1);
      if (2 * (static_cast<int64_t>(group) + 1) > (int64_t{1} << bits)) {
        std::vector<Slot> old;
        old.swap(table);
        ++bits;
        table.assign(size_t{1} << bits, Slot{0, -1});
        for (const Slot& entry : old) {
          if (entry.group >= 0) table[slot_of(entry.id)] = entry;
        }
        slot = slot_of(id);
      }
      table[slot] = Slot{id, group};
      group_start.push_back(0);
    }
    group_of[i] = table[slot].group;
    ++group_start[group_of[i] + 1];
  }
  return static_cast<int64_t>(group_start.size()) - 1;
}

// Arbitrary ids: groups are numbered densely, a counting sort lists each group's members
// in input order, then groups are normalized in parallel. O(B) time and memory.
void normalize_scattered(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                         bool scale_by_std, double epsilon, float* advantages) {
  std::unique_ptr<int32_t[]> group_of(new int32_t[num_rewards]);
  std::vector<int32_t> group_start;  // group sizes first, then their prefix sums
  const int64_t num_groups = number_groups(group_ids, num_rewards, group_of.get(), group_start);
  for (int64_t g = 0; g < num_groups; ++g) group_start[g + 1] += group_start[g];

  std::unique_ptr<int32_t[]> members(new int32_t[num_rewards]);
  std::vector<int32_t> cursor(group_start.begin(), group_start.end() - 1);
  for (int64_t i = 0; i < num_rewards; ++i) members[cursor[group_of[i]]++] = static_cast<int32_t>(i);

  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kGroupsPerChunk;
    const int64_t last = std::min(num_groups, first + kGroupsPerChunk);
    for (int64_t g = first; g < last; ++g) {
      if (group_start[g + 1] == group_start[g]) continue;  // an unused id in a dense range
      const int32_t* group_members = members.get() + group_start[g];
      normalize_group(rewards, group_start[g + 1] - group_start[g],
                      [group_members](int64_t k) { return group_members[k]; }, scale_by_std,
                      epsilon, advantages);
    }
  };
  parallel_for(chunk_count(num_groups, kGroupsPerChunk), body);
}

}  // namespace
}  // namespace tirl

extern "C" tirl_group_advantages_options tirl_group_advantages_options_default(void) {
  tirl_group_advantages_options options;
  options.scale_by_std = 1;
  options.epsilon = 1e-6;
  return options;
}

extern "C" tirl_status tirl_group_advantages(const float* rewards, int64_t num_rewards,
                                             const int32_t* group_ids, int64_t group_size,
                                             const tirl_group_advantages_options* options,
                                             float* advantages, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_rewards, kOp, "num_rewards")) ||
        (s = check_pointer(rewards, num_rewards, kOp, "rewards")) ||
        (s = check_pointer(advantages, num_rewards, kOp, "advantages")) ||
        (s = check_cpu_device(device, kOp))) {
      return s;
    }
    if (options == nullptr) return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) + ": expected options");
    if (!(options->epsilon >= 0.0) || !std::isfinite(options->epsilon)) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) +
                                                   ": expected a finite epsilon >= 0 but received " +
                                                   format_double(options->epsilon));
    }
    // No rewards, no groups: an empty typed array may arrive as a null group_ids.
    if (num_rewards == 0) return ok();
    if (group_ids != nullptr && num_rewards > INT32_MAX) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": expected at most 2^31 - 1 rewards with group ids");
    }
    if (group_ids == nullptr) {
      if (group_size < 1 || num_rewards % group_size != 0) {
        return fail(TIRL_ERROR_INVALID_ARGUMENT,
                    std::string(kOp) + ": expected group ids, or a group size >= 1 that divides " +
                        std::to_string(num_rewards) + " rewards, but received group size " +
                        std::to_string(group_size));
      }
    }
    const bool scale_by_std = options->scale_by_std != 0;
    if (!normalize_runs(rewards, num_rewards, group_ids, group_size, scale_by_std,
                        options->epsilon, advantages)) {
      normalize_scattered(rewards, num_rewards, group_ids, scale_by_std, options->epsilon,
                          advantages);
    }
    return ok();
  });
}

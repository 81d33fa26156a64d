#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "cpu/group_advantages_divide.h"
#include "cpu/ops.h"
#include "math/group_advantages.h"

namespace tirl::cpu {
namespace {

// Contiguous groups are processed by the chunk in which they start; a chunk is a fixed
// range of rewards, so the work split depends only on the size.
constexpr int64_t kRewardsPerChunk = 4096;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only` on the quiet reference VM: 65,536 rewards in
// groups of 8 ran 1.29-1.34x on 2 threads vs 1, two runs of 15 paired rounds; 4,096 stay
// on one). The earlier 65,536 had been measured on a loaded machine.
constexpr int64_t kMinRewardsPerThread = 16384;

// One group's sums while the scattered sweeps run: its sum, then its mean (first); its
// count, then its sum of squared deviations, then 1 / (std + epsilon) (second).
struct GroupMoments {
  double first;
  double second;
};

// The accumulators of the scattered sweeps, kept by each calling thread between calls up to
// kKeptGroups groups (1.5 MiB): fresh pages would cost a fault per 4 KiB on every call,
// more than the sweeps themselves at 65,536 rewards.
constexpr int64_t kKeptGroups = int64_t{1} << 16;

class GroupScratch {
 public:
  explicit GroupScratch(int64_t num_groups) {
    Kept& kept = thread_kept();
    if (num_groups <= kKeptGroups) {
      kept.moments.resize(static_cast<size_t>(kKeptGroups));
      kept.counts.resize(static_cast<size_t>(kKeptGroups));
      moments_ = kept.moments.data();
      counts_ = kept.counts.data();
    } else {
      own_moments_.resize(static_cast<size_t>(num_groups));
      own_counts_.resize(static_cast<size_t>(num_groups));
      moments_ = own_moments_.data();
      counts_ = own_counts_.data();
    }
    std::fill(moments_, moments_ + num_groups, GroupMoments{0.0, 0.0});
  }
  GroupMoments* moments() { return moments_; }
  int64_t* counts() { return counts_; }

 private:
  struct Kept {
    std::vector<GroupMoments> moments;
    std::vector<int64_t> counts;
  };
  static Kept& thread_kept() {
    thread_local Kept kept;
    return kept;
  }
  GroupMoments* moments_;
  int64_t* counts_;
  std::vector<GroupMoments> own_moments_;
  std::vector<int64_t> own_counts_;
};

// The group loops, compiled once per SIMD path (common/simd.h).
#define TIRL_SIMD_KERNELS "cpu/group_advantages_kernels.inc"
#include "common/simd_kernels.h"

// Groups that are contiguous runs: every `group_size` rewards, or runs of equal ids when
// the ids never decrease. Returns false (having written garbage) if `group_ids` turns out
// not to be sorted, so that the caller falls back to hashing; the check rides along with
// the work instead of costing a pass of its own.
bool normalize_runs(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                    int64_t group_size, bool scale_by_std, double epsilon, float* advantages) {
  const int64_t num_chunks = chunk_count(num_rewards, kRewardsPerChunk);
  std::vector<uint8_t> unsorted(static_cast<size_t>(num_chunks), 0);
  const auto normalize_runs_in = TIRL_SIMD_SELECT(normalize_runs_in);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kRewardsPerChunk;
    const int64_t last = std::min(num_rewards, first + kRewardsPerChunk);
    unsorted[chunk] = !normalize_runs_in(rewards, num_rewards, group_ids, group_size, first, last,
                                         scale_by_std, epsilon, advantages);
  };
  parallel_for(num_chunks, body, min_chunks(kMinRewardsPerThread, kRewardsPerChunk));
  return std::find(unsorted.begin(), unsorted.end(), 1) == unsorted.end();
}

// Numbers groups of arbitrary ids densely by an open-addressing hash table, in order of
// first appearance: group_of[i] in [0, returned count).
int64_t number_groups(const int32_t* group_ids, int64_t num_rewards, int32_t* group_of) {
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
  int32_t num_groups = 0;
  for (int64_t i = 0; i < num_rewards; ++i) {
    const int32_t id = group_ids[i];
    if (i > 0 && id == group_ids[i - 1]) {  // runs of equal ids are common: skip the probe
      group_of[i] = group_of[i - 1];
      continue;
    }
    uint64_t slot = slot_of(id);
    if (table[slot].group < 0) {
      if (2 * (static_cast<int64_t>(num_groups) + 1) > (int64_t{1} << bits)) {
        std::vector<Slot> old;
        old.swap(table);
        ++bits;
        table.assign(size_t{1} << bits, Slot{0, -1});
        for (const Slot& entry : old) {
          if (entry.group >= 0) table[slot_of(entry.id)] = entry;
        }
        slot = slot_of(id);
      }
      table[slot] = Slot{id, num_groups++};
    }
    group_of[i] = table[slot].group;
  }
  return num_groups;
}

// Arbitrary ids: three sweeps over the rewards in input order, scattering into one
// accumulator per group (normalize_scattered_sweeps). Ids spanning a range of at most 2B
// values (e.g. prompt indices) index the accumulators as id - min directly, which leaves
// unused ones; others are numbered by a hash table first. O(B) time, O(groups) memory for
// dense ids. One thread: the sweeps are bound by the scattered accesses, and a split would
// change the order of each group's sums.
void normalize_scattered(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                         bool scale_by_std, double epsilon, float* advantages) {
  int32_t low = group_ids[0], high = group_ids[0];
  for (int64_t i = 1; i < num_rewards; ++i) {
    low = std::min(low, group_ids[i]);
    high = std::max(high, group_ids[i]);
  }
  const int64_t range = static_cast<int64_t>(high) - low + 1;
  if (range <= 2 * num_rewards && range <= INT32_MAX) {
    GroupScratch groups(range);
    TIRL_SIMD_SELECT(normalize_dense_ids)(rewards, num_rewards, group_ids, low, groups.moments(),
                                          groups.counts(), range, scale_by_std, epsilon,
                                          advantages);
    return;
  }
  std::unique_ptr<int32_t[]> group_of(new int32_t[num_rewards]);
  const int64_t num_groups = number_groups(group_ids, num_rewards, group_of.get());
  GroupScratch groups(num_groups);
  TIRL_SIMD_SELECT(normalize_numbered)(rewards, num_rewards, group_of.get(), groups.moments(),
                                       groups.counts(), num_groups, scale_by_std, epsilon,
                                       advantages);
}

}  // namespace

tirl_status group_advantages(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                             int64_t group_size, const tirl_group_advantages_options* options,
                             float* advantages, tirl_device) {
  if (num_rewards == 0) return ok();
  const bool scale_by_std = options->scale_by_std != 0;
  if (!normalize_runs(rewards, num_rewards, group_ids, group_size, scale_by_std,
                      options->epsilon, advantages)) {
    normalize_scattered(rewards, num_rewards, group_ids, scale_by_std, options->epsilon,
                        advantages);
  }
  return ok();
}

}  // namespace tirl::cpu

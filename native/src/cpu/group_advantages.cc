#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "common/thread_kept.h"
#include "cpu/group_advantages_divide.h"
#include "cpu/ops.h"
#include "math/group_advantages.h"

namespace tirl::cpu {
namespace {

// Contiguous groups are processed by the chunk in which they start; a chunk is a fixed
// range of rewards, so the work split depends only on the size.
constexpr int64_t kRewardsPerChunk = 4096;
// Below this much work per thread a call stays on fewer threads (common/parallel.h).
// Measured on the EPYC VM of 2026-12-06 at the sizes between the bench sweep's (median of
// 21 paired rounds, 2 threads vs 1, six runs): 32,768 rewards in groups of 8, the old
// threshold's first two-thread size, ran 0.89-0.99x (below 0.95x in four); 49,152
// 0.96-1.07x; 65,536 1.04-1.21x and 98,304 1.17-1.41x. (The sweep had measured 1.29-1.34x
// at 65,536.)
constexpr int64_t kMinRewardsPerThread = 32768;

// One group's sums while the scattered sweeps run: its sum, then its mean (first); its
// count, then its sum of squared deviations, then 1 / (std + epsilon) (second).
struct GroupMoments {
  double first;
  double second;
};

// The accumulators of the scattered sweeps (zeroed by them), kept by each calling thread between calls up to
// kKeptGroups groups (1.5 MiB): fresh pages would cost a fault per 4 KiB on every call,
// more than the sweeps themselves at 65,536 rewards.
constexpr int64_t kKeptGroups = int64_t{1} << 16;

class GroupScratch {
 public:
  explicit GroupScratch(int64_t num_groups) {
    if (num_groups <= kKeptGroups) {
      moments_ = thread_kept<GroupScratch, GroupMoments>(kKeptGroups);
      counts_ = thread_kept<GroupScratch, int64_t>(kKeptGroups);
    } else {
      own_moments_.resize(static_cast<size_t>(num_groups));
      own_counts_.resize(static_cast<size_t>(num_groups));
      moments_ = own_moments_.data();
      counts_ = own_counts_.data();
    }
  }
  GroupMoments* moments() { return moments_; }
  int64_t* counts() { return counts_; }

 private:
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
  // Shuffled ids show in their first few: a look at those on the calling thread spares
  // waking another only to find the same (65,536 random ids, whose scattered path then runs
  // on one thread, ran 0.94-0.95x on 2 threads vs 1 in four runs).
  constexpr int64_t kFirstIdsLooked = 64;
  if (group_ids != nullptr &&
      !std::is_sorted(group_ids, group_ids + std::min(num_rewards, kFirstIdsLooked))) {
    return false;
  }
  parallel_for(num_chunks, body, min_chunks(kMinRewardsPerThread, kRewardsPerChunk), Scaling::kMemory);
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

// Rewards by ids: below this many rewards a thread, the first two sweeps stay on the
// calling thread (and the advantages sweep on fewer threads). A part costs the calling
// thread a pass over all ids that lists its rewards, and a pool thread that wakes late
// leaves the caller both parts (measured on a loaded machine: 1.07-1.09x one thread's
// time). On the EPYC VM of 2026-12-06 (median of 21 paired rounds, 2 threads vs 1, at the
// sizes between the bench sweep's): 32,768 random ids ran 0.42-0.97x (below 0.95x in seven
// runs of eight), 49,152 0.83-1.00x, 65,536 0.99-1.21x in quiet spells and 0.5-0.89x in
// loaded ones, 98,304 1.22-1.26x in quiet spells; so two parts start at 98,304.
constexpr int64_t kMinScatteredRewardsPerThread = 49152;

// A part lists its rewards in buffers of num_rewards entries that each thread keeps
// between calls up to this size. Above it, fresh buffers would cost a page fault per 4 KiB
// on every call (measured at 1M rewards: 2 threads took 1.4-1.7x one thread's time), so
// the calling thread runs all three sweeps, as it always did.
constexpr int64_t kKeptPartRewards = int64_t{1} << 18;

// How many parts of the groups normalize_scattered cuts `num_groups` groups of
// `num_rewards` rewards into, one a thread: 1 (all three sweeps on the calling thread)
// with one thread, below kMinScatteredRewardsPerThread rewards a part, or above
// kKeptPartRewards rewards.
int64_t scattered_parts(int64_t num_rewards, int64_t num_groups) {
  constexpr int64_t kMinGroupsPerPart = 64;
  if (num_rewards > kKeptPartRewards) return 1;
  return std::max<int64_t>(1, std::min({static_cast<int64_t>(num_threads()),
                                        num_rewards / kMinScatteredRewardsPerThread,
                                        num_groups / kMinGroupsPerPart}));
}

// The lists of one part's rewards and groups (select_part), kept by each thread between
// calls (scattered_parts cuts no parts above kKeptPartRewards).
struct PartLists {
  explicit PartLists(int64_t num_rewards)
      : groups(thread_kept<PartLists, int32_t>(static_cast<size_t>(num_rewards + 16))),
        rewards(thread_kept<PartLists, float>(static_cast<size_t>(num_rewards + 16))) {}
  int32_t* groups;
  float* rewards;
};

// Arbitrary ids: three sweeps over the rewards in input order, scattering into one
// accumulator per group (scattered_scales, scattered_advantages). Ids spanning a range of
// at most 2B values (e.g. prompt indices) index the accumulators as id - min directly,
// which leaves unused ones; others are numbered by a hash table first. O(B) time,
// O(groups) memory for dense ids. The sweeps are bound by the scattered accesses; with
// more than one thread the groups are cut into parts, one a thread, each of which lists
// its own rewards (one vectorised streaming pass over the ids) and runs the first two
// sweeps over its list alone, then the advantages sweep runs by chunks of the rewards.
// Each group's sums still run over its rewards in input order, so the bits are those of
// one thread.
void normalize_scattered(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                         bool scale_by_std, double epsilon, float* advantages) {
  int32_t low, high;
  TIRL_SIMD_SELECT(id_range)(group_ids, num_rewards, &low, &high);
  const int64_t range = static_cast<int64_t>(high) - low + 1;
  const int32_t* ids = group_ids;  // reward i is of group ids[i] - low
  int64_t num_groups = range;
  std::unique_ptr<int32_t[]> group_of;
  if (range > 2 * num_rewards || range > INT32_MAX) {
    group_of.reset(new int32_t[num_rewards]);
    num_groups = number_groups(group_ids, num_rewards, group_of.get());
    ids = group_of.get();
    low = 0;
  }
  GroupScratch groups(num_groups);
  const int64_t parts = scattered_parts(num_rewards, num_groups);
  if (parts == 1) {
    TIRL_SIMD_SELECT(normalize_ids)(rewards, num_rewards, ids, low, groups.moments(),
                                    groups.counts(), num_groups, scale_by_std, epsilon,
                                    advantages);
    return;
  }
  // Part p: groups [first_group(p), first_group(p + 1)), cut at multiples of 8 groups:
  // neighbouring parts share at most the one cache line of each array at their boundary.
  auto first_group = [&](int64_t p) {
    return p == parts ? num_groups : num_groups * p / parts / 8 * 8;
  };
  const auto select_part = TIRL_SIMD_SELECT(select_part);
  const auto part_scales = TIRL_SIMD_SELECT(part_scales);
  std::atomic<bool> out_of_memory{false};
  auto scales = [&](int64_t p) {
    try {  // parallel_for's bodies must not throw: the caller rethrows
      PartLists lists(num_rewards);
      const int64_t first = first_group(p), count = first_group(p + 1) - first;
      const int64_t listed = select_part(rewards, num_rewards, ids, low, first, count,
                                         lists.groups, lists.rewards);
      part_scales(lists.groups, lists.rewards, listed, groups.moments(), groups.counts(), first,
                  count, scale_by_std, epsilon);
    } catch (const std::bad_alloc&) {
      out_of_memory.store(true, std::memory_order_relaxed);
    }
  };
  parallel_parts(parts, scales);
  if (out_of_memory.load(std::memory_order_relaxed)) throw std::bad_alloc();
  const auto scattered_advantages = TIRL_SIMD_SELECT(scattered_advantages);
  auto advantages_of = [&](int64_t chunk) {
    const int64_t first = chunk * kRewardsPerChunk;
    scattered_advantages(rewards, first, std::min(num_rewards, first + kRewardsPerChunk), ids,
                         low, groups.moments(), advantages);
  };
  parallel_for(chunk_count(num_rewards, kRewardsPerChunk), advantages_of,
               min_chunks(kMinScatteredRewardsPerThread, kRewardsPerChunk));
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

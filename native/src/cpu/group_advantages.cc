#include <algorithm>
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
#include "cpu/ops.h"
#include "math/group_advantages.h"

namespace tirl::cpu {
namespace {

// Contiguous groups are processed by the chunk in which they start; a chunk is a fixed
// range of rewards, so the work split depends only on the size.
constexpr int64_t kRewardsPerChunk = 4096;
// Scattered groups (arbitrary ids) are processed a fixed number of groups per chunk.
constexpr int64_t kGroupsPerChunk = 1024;

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

  const auto normalize_listed_groups = TIRL_SIMD_SELECT(normalize_listed_groups);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kGroupsPerChunk;
    normalize_listed_groups(rewards, members.get(), group_start.data(), first,
                            std::min(num_groups, first + kGroupsPerChunk), scale_by_std, epsilon,
                            advantages);
  };
  parallel_for(chunk_count(num_groups, kGroupsPerChunk), body);
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

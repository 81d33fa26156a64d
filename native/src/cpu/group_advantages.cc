#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
    if (group_ids != nullptr) {
      for (int64_t i = std::max<int64_t>(first, 1); i < last; ++i) {
        if (group_ids[i] < group_ids[i - 1]) {
          unsorted[chunk] = 1;
          return;
        }
      }
    }
    // The first group starting in [first, last); a group that started earlier belongs to
    // an earlier chunk.
    int64_t start = first;
    if (group_ids == nullptr) {
      start = (first + group_size - 1) / group_size * group_size;
    } else {
      while (start < last && start > 0 && group_ids[start] == group_ids[start - 1]) ++start;
    }
    while (start < last) {
      int64_t end;
      if (group_ids == nullptr) {
        end = std::min(num_rewards, start + group_size);
      } else {
        end = start + 1;
        while (end < num_rewards && group_ids[end] == group_ids[start]) ++end;
      }
      normalize_group(rewards + start, end - start, [](int64_t k) { return k; }, scale_by_std,
                      epsilon, advantages + start);
      start = end;
    }
  };
  parallel_for(num_chunks, body);
  return std::find(unsorted.begin(), unsorted.end(), 1) == unsorted.end();
}

// Arbitrary ids: an open-addressing hash table numbers the groups in order of first
// appearance, a counting sort lists each group's members in input order, then groups are
// normalized in parallel. O(B) time and memory.
void normalize_scattered(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                         bool scale_by_std, double epsilon, float* advantages) {
  int bits = 4;
  while ((int64_t{1} << bits) < 2 * num_rewards) ++bits;
  const int64_t capacity = int64_t{1} << bits;
  std::unique_ptr<int32_t[]> slot_id(new int32_t[capacity]);
  std::vector<int32_t> slot_group(static_cast<size_t>(capacity), -1);
  std::unique_ptr<int32_t[]> group_of(new int32_t[num_rewards]);
  std::vector<int32_t> group_start(1, 0);  // group sizes first, then their prefix sums

  for (int64_t i = 0; i < num_rewards; ++i) {
    const int32_t id = group_ids[i];
    if (i > 0 && id == group_ids[i - 1]) {  // runs of equal ids are common: skip the probe
      group_of[i] = group_of[i - 1];
      ++group_start[group_of[i] + 1];
      continue;
    }
    uint64_t slot = (static_cast<uint32_t>(id) * 0x9E3779B1u) >> (32 - bits);
    while (slot_group[slot] >= 0 && slot_id[slot] != id) slot = (slot + 1) & (capacity - 1);
    if (slot_group[slot] < 0) {
      slot_group[slot] = static_cast<int32_t>(group_start.size() - 1);
      slot_id[slot] = id;
      group_start.push_back(0);
    }
    group_of[i] = slot_group[slot];
    ++group_start[group_of[i] + 1];
  }
  const int64_t num_groups = static_cast<int64_t>(group_start.size()) - 1;
  for (int64_t g = 0; g < num_groups; ++g) group_start[g + 1] += group_start[g];

  std::unique_ptr<int32_t[]> members(new int32_t[num_rewards]);
  std::vector<int32_t> cursor(group_start.begin(), group_start.end() - 1);
  for (int64_t i = 0; i < num_rewards; ++i) members[cursor[group_of[i]]++] = static_cast<int32_t>(i);

  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kGroupsPerChunk;
    const int64_t last = std::min(num_groups, first + kGroupsPerChunk);
    for (int64_t g = first; g < last; ++g) {
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

// common/parallel.cc's parallel_for: every chunk runs exactly once, whatever the thread
// count, the chunk count, the time a chunk takes (cheap chunks are claimed several at a
// time, slow ones one by one) and however many callers share the pool at once; a call
// with fewer chunks than min_chunks_per_thread per thread runs on the calling thread. Small
// jobs back to back (a stream) get helpers even though none of them alone wakes one, and
// a large job after an idle spell wakes them, off the caller's CPU (up to 15 helpers);
// parallel_parts wakes them before the caller runs its own part.
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "check.h"
#include "common/parallel.h"

namespace {

// Runs parallel_for over `chunks` chunks (parallel_parts where min_chunks_per_thread is 0)
// that each spin `spin` iterations and returns whether each ran exactly once.
bool each_once(int64_t chunks, int spin, int64_t min_chunks_per_thread = 1) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
  for (auto& r : runs) r.store(0);
  auto body = [&](int64_t c) {
    volatile int sink = 0;
    for (int i = 0; i < spin; ++i) sink = sink + i;
    runs[static_cast<size_t>(c)].fetch_add(1);
  };
  if (min_chunks_per_thread == 0) {
    tirl::parallel_parts(chunks, body);
  } else {
    tirl::parallel_for(chunks, body, min_chunks_per_thread);
  }
  for (auto& r : runs) {
    if (r.load() != 1) return false;
  }
  return true;
}

// Jobs whose chunks each spin for `chunk`, run by run(body), each after an idle spell (the
// helpers asleep), up to 20 until one has run a chunk on a helper. Returns how many chunks
// of that job ran on helpers, and how many of those with an affinity `expected` accepts.
template <class Run, class Expected>
std::pair<int, int> helper_chunks_after_idle(std::chrono::microseconds chunk, Run run, Expected expected) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0}, as_expected{0};
  auto body = [&](int64_t) {
    const auto until = std::chrono::steady_clock::now() + chunk;
    while (std::chrono::steady_clock::now() < until) {
    }
    if (std::this_thread::get_id() == caller) return;
    ++elsewhere;
    cpu_set_t mine;
    as_expected += sched_getaffinity(0, sizeof(mine), &mine) == 0 && expected(mine);
  };
  for (int attempt = 0; attempt < 20 && elsewhere.load() == 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    run(body);
  }
  return {elsewhere.load(), as_expected.load()};
}

}  // namespace

int main() {
  // A stream of small jobs, each far below what wakes a sleeping helper on its own (8 chunks
  // of about a microsecond): once one has woken the helper, it polls between jobs and takes
  // chunks. First in the test, with one helper: the pool as a two-core machine has it. With
  // one CPU, a helper seldom gets to run before the caller has taken every chunk.
  tirl::set_num_threads(2);
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= 2) {
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> elsewhere{0};
    auto body = [&](int64_t) {
      volatile int sink = 0;
      for (int i = 0; i < 1000; ++i) sink = sink + i;
      elsewhere += std::this_thread::get_id() != caller;
    };
    tirl::parallel_for(8, body, 1);  // starts the helper
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // which then sleeps
    elsewhere = 0;
    for (int job = 0; job < 20000 && elsewhere.load() == 0; ++job) tirl::parallel_for(8, body, 1);
    CHECK(elsewhere.load() > 0, "no chunk of 20,000 small jobs back to back ran on a helper");
  }

  // A job after an idle spell (no stream) is timed on its first chunk before it is posted:
  // one with milliseconds of work left wakes the sleeping helper, which takes chunks. The
  // helper was woken allowed every CPU of the caller's but one (the caller's own).
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= 2) {
    const auto [on_helpers, steered] = helper_chunks_after_idle(
        std::chrono::microseconds(500), [](auto& body) { tirl::parallel_for(32, body, 1); },
        [&](const cpu_set_t& mine) {
          cpu_set_t both;
          CPU_AND(&both, &mine, &cpus);
          return CPU_COUNT(&mine) == CPU_COUNT(&cpus) - 1 && CPU_EQUAL(&both, &mine);
        });
    CHECK(on_helpers > 0, "no chunk of 20 jobs of 16 ms after an idle spell ran on a helper");
    CHECK(steered == on_helpers, "%d of %d helper chunks ran allowed other than the caller's CPUs but one",
          on_helpers - steered, on_helpers);
  }

  // Parts after an idle spell run at once: the helper is woken before the caller runs its
  // own part, and takes another.
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= 2) {
    const int on_helpers = helper_chunks_after_idle(
        std::chrono::milliseconds(2), [](auto& part) { tirl::parallel_parts(2, part); },
        [](const cpu_set_t&) { return true; }).first;
    CHECK(on_helpers > 0, "no part of 20 pairs of 2 ms parts after an idle spell ran on a helper");
  }

  for (int threads : {1, 2, 3, 8}) {
    tirl::set_num_threads(threads);
    for (int64_t chunks : {0, 1, 2, 3, 7, 64, 1000, 100000}) {
      for (int spin : {0, 50, 20000}) {
        if (chunks * spin > 200'000'000) continue;
        CHECK(each_once(chunks, spin), "threads %d, %lld chunks, spin %d", threads, static_cast<long long>(chunks), spin);
        if (chunks <= 8) {
          CHECK(each_once(chunks, spin, 0), "parallel_parts: threads %d, %lld parts, spin %d", threads,
                static_cast<long long>(chunks), spin);
        }
      }
    }
  }

  // Below the minimum per thread the caller runs every chunk itself.
  tirl::set_num_threads(4);
  {
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> elsewhere{0};
    auto body = [&](int64_t) { elsewhere += std::this_thread::get_id() != caller; };
    tirl::parallel_for(15, body, 8);
    CHECK(elsewhere.load() == 0, "%d chunks ran off the calling thread", elsewhere.load());
  }

  // After an idle spell, each chunk runs exactly once on either side of the wake rule: jobs
  // too small to wake a helper (the caller runs them whole, no job made) and jobs that wake
  // it after the caller has run and timed their first chunk (the job made with that chunk
  // done). 64 chunks of ~0.2 us and of ~5 us.
  for (int spin : {200, 5000}) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      CHECK(each_once(64, spin), "after an idle spell, 64 chunks of %d spins: not each exactly once", spin);
    }
  }

  // Several callers at once, each with its own job.
  {
    std::atomic<int> bad{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t) {
      callers.emplace_back([&bad, t] {
        for (int k = 0; k < 50; ++k) bad += !each_once(1000 + 97 * t + k, k % 3 == 0 ? 0 : 200);
      });
    }
    for (auto& c : callers) c.join();
    CHECK(bad.load() == 0, "%d concurrent calls ran a chunk other than once", bad.load());
  }

  // A pool of more than 15 helpers is not steered: its helpers, the earlier ones steered
  // above included, may run wherever the caller may.
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= 2) {
    tirl::set_num_threads(17);  // the first job posted starts the 16 helpers, then steers
    const auto [on_helpers, unsteered] = helper_chunks_after_idle(
        std::chrono::microseconds(500), [](auto& body) { tirl::parallel_for(64, body, 1); },
        [&](const cpu_set_t& mine) { return CPU_EQUAL(&mine, &cpus) != 0; });
    CHECK(on_helpers > 0, "no chunk of 20 jobs of 32 ms after an idle spell ran on a helper");
    CHECK(unsteered == on_helpers, "%d of %d chunks of a pool of 16 helpers ran on a helper steered",
          on_helpers - unsteered, on_helpers);
  }

  if (failures == 0) printf("parallel_for: ok\n");
  return failures == 0 ? 0 : 1;
}

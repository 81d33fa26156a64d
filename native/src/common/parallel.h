// A small process-wide thread pool with deterministic work splitting.
//
// Kernels cut their work into chunks whose boundaries depend only on the input size,
// never on the thread count, and combine per-chunk partial results in chunk order. Which
// thread runs which chunk then cannot change any result: the output is bitwise identical
// for 1 or 64 threads.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace tirl {

// A non-owning reference to a callable `void(int64_t)`; cheaper than std::function.
class ChunkBody {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ChunkBody>>>
  ChunkBody(F& f)  // NOLINT: implicit by design
      : object_(static_cast<void*>(&f)), call_([](void* o, int64_t i) { (*static_cast<F*>(o))(i); }) {}

  void operator()(int64_t chunk) const { call_(object_, chunk); }

 private:
  void* object_;
  void (*call_)(void*, int64_t);
};

int num_threads();
bool set_num_threads(int n);

// Runs body(c) for every c in [0, num_chunks) on up to num_threads() threads, the calling
// thread included, and returns when all are done. Safe to call from several threads at
// once (each call is its own job); body must not throw.
//
// min_chunks_per_thread: each thread taking part must have at least this many chunks to
// run, so a call with fewer than 2 * min_chunks_per_thread chunks runs on the calling
// thread alone. Waking a pooled thread costs about as much as tens of microseconds of
// work, so each op sets this from its measured cost per chunk (`kMin...PerThread` next to
// its chunk size, tuned with `tirl bench`'s "2 threads vs 1" table). It changes which
// thread runs a chunk, never the chunks, so results stay bitwise the same.
// After an idle spell it costs far more on some VMs (benchmarks/native/wake_cost.c): on the
// 2-vCPU AMD EPYC VM of 2026-12-06 the signal took the caller 11-70 us and, after 3 ms of
// both threads sleeping, a second thread sped up 1 ms of arithmetic by 0.98x (1.73x when
// the caller had been busy), so a call that followed a pause gained little from a helper:
// that VM's kernel (kernel.sched_vcpu_pack) woke the helper on the caller's own vCPU in 281
// of 303 such passes. So the pool wakes its helpers allowed every CPU of the caller's but
// the caller's own (parallel.cc, steer_helpers): then none ran there, and after 3 ms of
// sleep, 3 passes of 100 us ran 1.15-1.16x faster on two threads than on one, against
// 0.90-0.91x unsteered (wake_cost.c, 2026-12-07). benchmarks/ladder.ts times each op's first
// two-thread sizes. Calls back to back do not pay the wake-up: a helper polls for the next
// job for 50 us before it sleeps.
// A job that finds the helpers asleep wakes them only if it is one of a stream (posted
// within 500 us of the last job's end: woken at once) or has about 100 us of work left
// after its first chunk, which the caller runs and times (parallel.cc, kStreamGap and
// kMinWakeWork); otherwise the caller runs it alone, no job made or posted to the pool.
//
// scaling: how the job speeds up with a second thread. A job that streams memory with
// little arithmetic a byte (Scaling::kMemory: its `arithmetic cap` in the bench is several
// times its `% copy`) gains only what a second core adds to the bandwidth, so it wakes a
// sleeping helper only for more work (150 us: kMinWakeWorkMemoryBound).
enum class Scaling { kCompute, kMemory };
void parallel_for(int64_t num_chunks, ChunkBody body, int64_t min_chunks_per_thread = 1,
                  Scaling scaling = Scaling::kCompute);

// Runs body(p) for every part p in [0, num_parts) as parallel_for does, for parts that the
// caller has sized to be worth a thread each (one a thread): sleeping helpers are woken at
// once. parallel_for would first time the caller's first chunk, here its whole share, and
// only then wake a helper for the rest: the parts would run one after the other (cold
// groupAdvantages of 98,304-196,608 rewards by random ids, two parts: 0.83-0.95x of one
// thread on the EPYC VM of 2026-12-07).
void parallel_parts(int64_t num_parts, ChunkBody body);

// The min_chunks_per_thread for a minimum of `min_items` items per thread in chunks of
// `items_per_chunk` items. Chunks of no items (sequences of no tokens) are never worth a
// thread: the whole call runs on the calling thread.
constexpr int64_t min_chunks(int64_t min_items, int64_t items_per_chunk) {
  return items_per_chunk <= 0 ? INT64_MAX
         : min_items <= items_per_chunk ? 1
                                        : min_items / items_per_chunk + (min_items % items_per_chunk != 0);
}

// The cache line of every CPU the library targets. Per-chunk accumulators that a chunk
// updates while it runs start on a line of their own (align_to_cache_line, strides in
// whole lines), so that threads on neighbouring chunks never write one line.
constexpr int64_t kCacheLineBytes = 64;

// The first address at or after `p` on a cache-line boundary; storage for it needs
// kCacheLineBytes - 1 bytes beyond what it holds.
template <class T>
T* align_to_cache_line(T* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (address + (kCacheLineBytes - 1)) & ~uintptr_t{kCacheLineBytes - 1};
  return reinterpret_cast<T*>(reinterpret_cast<char*>(p) + (aligned - address));
}

// Chunks of `chunk` items covering `n` items: ceil(n / chunk), without overflow for any n
// (an empty batch may come with a vocabulary size near 2^63).
inline int64_t chunk_count(int64_t n, int64_t chunk) { return n / chunk + (n % chunk != 0); }

}  // namespace tirl

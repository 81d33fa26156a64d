#include "common/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace tirl {

namespace {

int default_thread_count() {
  if (const char* env = std::getenv("TIRL_NUM_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n >= 1) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n >= 1 ? static_cast<int>(n) : 1;
}

std::atomic<int> configured_threads{default_thread_count()};

// How long a caller that has run out of chunks spins for the helpers' last ones before it
// sleeps. Each helper holds at most one chunk by then; waking a sleeping thread costs
// tens of microseconds on a VM (the vCPU must be scheduled again), as much as a whole
// small call, while the wait is usually a fraction of a chunk.
constexpr std::chrono::microseconds kCallerSpin{50};

// How long a helper that has run out of jobs polls for the next one before it sleeps. A
// training step calls kernels back to back; a helper still polling joins the next call at
// once, where waking a sleeping one cost the caller a system call (7-10 us on the EPYC VM
// of 2026-12-06: an inter-processor interrupt through the hypervisor) and the helper
// joined 22-26 us late on average, a quarter of a 100 us call. It yields the CPU while it
// polls, so that a thread the kernel put on the same CPU runs first.
constexpr std::chrono::microseconds kHelperPoll{50};

// The least work a job must hold for the caller to wake a sleeping helper: one thread's
// time for the chunks left after the caller's first chunk, which it times. Set with
// benchmarks/ladder.ts --cold (2 threads vs 1, one call after each cache sweep, medians of
// 41-61 paired rounds) on the EPYC VM of 2026-12-07, the helpers steered off the caller's
// vCPU (steer_helpers): at 100 us, ppoLoss of 64 x 2048 tokens read 1.13-1.19x (0.95-1.01x
// at 300 us), and no size of ppoLoss, sapo, clip_cov, gae, the optimal-token baseline,
// reinforce_plus_plus, rolloutCorrection or tokenLogprobs read below 0.95x. At 60 us (80 us
// memory-bound) groupAdvantages, feedbackMask and sequenceLogprobs read 0.87-0.94x at some
// sizes. Before the steering the kernel put the woken helper on the caller's own vCPU in
// half the wake-ups or more, and 300 us (720 us memory-bound) was the least that paid.
constexpr std::chrono::microseconds kMinWakeWork{100};

// kMinWakeWork for a memory-bound job (Scaling::kMemory). A helper saves at most
// 1 - 1/g of the time left, g being what a second thread speeds the job up by: about 2
// for arithmetic, and for a job that streams memory the ratio of two threads' bandwidth
// to one's, 1.26-1.65 on the EPYC VM (STREAM copy). The same saving then takes more work.
// At 150 us (the ladder above): dpoLoss of 98,304-262,144 pairs read 1.20-1.46x,
// sequenceLogprobs of 512 x 2048 tokens 1.11-1.43x, grpo and rloo of 384-512 x 2048
// 1.02-1.24x (about 1.00x at 720 us, where they stayed on one thread); none below 0.95x.
constexpr std::chrono::microseconds kMinWakeWorkMemoryBound{150};

// A job posted within this time of the previous job's end is one of a stream of calls (a
// training step's kernels back to back): its wake-up keeps the helpers polling through the
// calls that follow, which then join at no cost, so it is made whatever the job's size.
constexpr std::chrono::microseconds kStreamGap{500};

// The least work a claim of chunks should hold (Job::work): far above the cost of a claim
// (two atomics on lines shared by the cores, ~0.1-0.2 us), far below a call worth threads.
constexpr std::chrono::microseconds kMinClaim{4};

inline std::chrono::steady_clock::rep ticks_now() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}
inline std::chrono::steady_clock::rep ticks(std::chrono::microseconds span) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(span).count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Spins until done() or `limit` has passed; returns done().
template <class Done>
bool spin_until(Done done, std::chrono::microseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

struct Job {
  ChunkBody body;
  int64_t num_chunks;
  // Every thread of the job claims with `next` and reports with `finished` once a claim:
  // each on a cache line of its own, apart from the read-only fields above.
  alignas(kCacheLineBytes) std::atomic<int64_t> next{0};
  alignas(kCacheLineBytes) std::atomic<int64_t> finished{0};
  alignas(kCacheLineBytes) std::atomic<int64_t> claim{1};  // chunks a claim takes (work)
  alignas(kCacheLineBytes) int helpers_wanted;  // pool threads that may join, besides the caller
  int helpers_joined = 0;  // guarded by the pool's mutex
  // Helpers still inside work(); changed under done_mutex, read without it while spinning.
  std::atomic<int> helpers_active{0};
  std::mutex done_mutex;
  std::condition_variable done;

  Job(ChunkBody b, int64_t n, int helpers) : body(b), num_chunks(n), helpers_wanted(helpers) {}

  // Claims and runs runs of chunks until none is left. Returns after its last chunk.
  // A claim is `claim` chunks: one until the caller has timed its first chunk, then as many
  // as take kMinClaim (at most a share of the chunks). With one chunk a claim, the two
  // atomics on lines that bounce between the cores cost more than a chunk of a few
  // sequences (GRPO's advantages on 262,144 one-token sequences ran 1.8x slower on two
  // threads than on one); a claim of a few microseconds is what a helper preempted by
  // another process can hold up the call by, where a claim of a share of the chunks held
  // it up by that share.
  void work() {
    for (;;) {
      const int64_t take = claim.load(std::memory_order_relaxed);
      const int64_t first = next.fetch_add(take, std::memory_order_relaxed);
      if (first >= num_chunks) return;
      const int64_t last = std::min(num_chunks, first + take);
      for (int64_t c = first; c < last; ++c) body(c);
      report(last - first);
    }
  }

  // The caller's first claim: one chunk, timed, which sets `claim` (see work()). Returns
  // how long the chunks left would take one thread at that chunk's pace (seconds), or 0
  // when the helpers had taken every chunk.
  double timed_first_claim() {
    const int64_t first = next.fetch_add(1, std::memory_order_relaxed);
    if (first >= num_chunks) return 0;
    return first_claim_ran(first, timed_chunk(body, first));
  }

  // `body(chunk)`, timed: seconds.
  static double timed_chunk(const ChunkBody& body, int64_t chunk) {
    const auto start = std::chrono::steady_clock::now();
    body(chunk);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // The caller's first claim, chunk `first`, ran in `seconds`: sets `claim`, reports it, and
  // returns timed_first_claim's estimate of the chunks left.
  double first_claim_ran(int64_t first, double seconds) {
    const double wanted = std::ceil(kMinClaim.count() * 1e-6 / std::max(seconds, 1e-9));
    const int64_t share = std::max<int64_t>(1, num_chunks / (4 * (int64_t{helpers_wanted} + 1)));
    claim.store(std::min<int64_t>(share, static_cast<int64_t>(std::min(wanted, 1e9))), std::memory_order_relaxed);
    report(1);
    return seconds * static_cast<double>(num_chunks - 1 - first);
  }

 private:
  void report(int64_t chunks) {
    if (finished.fetch_add(chunks, std::memory_order_acq_rel) + chunks == num_chunks) {
      std::lock_guard<std::mutex> lock(done_mutex);
      done.notify_all();
    }
  }
};

// Workers are started on demand and live for the whole process; the pool is never
// destroyed, so exit never waits on (or races with) a worker.
class Pool {
 public:
  // Whether the last job ended within kStreamGap: its helpers may still poll.
  bool in_stream() const {
    return ticks_now() - last_end_.load(std::memory_order_relaxed) < ticks(kStreamGap);
  }
  // A job's chunks all ran on the caller, the pool untouched (run_chunks).
  void ran_alone() { last_end_.store(ticks_now(), std::memory_order_relaxed); }

  // Runs `job` with the helpers. `first_ran`: the caller has run and timed its first claim
  // (first_claim_ran) and chose to wake them; else the job is posted at once, where polling
  // helpers see `posted_` change and join at once and sleeping ones are woken, for a job
  // of a stream or of parts.
  void run(Job& job, bool first_ran) {
    if (post(job, /*steer=*/first_ran)) wake_.notify_all();
    if (!first_ran) job.timed_first_claim();
    job.work();
    {
      // No new helper may pick the job up once the caller has drained it.
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));
    }
    // The job lives on the caller's stack: wait for the last chunk and for every helper
    // to have left work() before returning, spinning first (kCallerSpin). The lock is
    // taken either way: a helper that has just left may still hold done_mutex.
    auto finished = [&] {
      return job.finished.load(std::memory_order_acquire) == job.num_chunks &&
             job.helpers_active.load(std::memory_order_acquire) == 0;
    };
    spin_until(finished, kCallerSpin);
    std::unique_lock<std::mutex> lock(job.done_mutex);
    job.done.wait(lock, finished);
    last_end_.store(ticks_now(), std::memory_order_relaxed);
  }

 private:
  // Queues `job` for the helpers (starting those it wants that do not exist yet), first
  // steering them off the caller's CPU (steer_helpers) where `steer` says so or some helper
  // sleeps: under the lock, before any helper can take the job. (A job of a stream whose
  // helpers still poll skips the steering's system calls.) Returns whether some helper
  // sleeps, to be woken.
  bool post(Job& job, bool steer) {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      while (workers_ < job.helpers_wanted) {
        handles_.reserve(handles_.size() + 1);  // no throw once the thread runs
        std::thread worker([this] { worker_loop(); });
        handles_.push_back(worker.native_handle());
        worker.detach();
        ++workers_;
      }
    } catch (const std::system_error&) {
      // No more threads (a process or container limit): the job runs on the workers there
      // are, the caller taking every chunk no helper takes. Results do not change.
    }
    if (steer || sleeping_ > 0) steer_helpers();
    jobs_.push_back(&job);
    posted_.fetch_add(1, std::memory_order_release);
    return sleeping_ > 0;
  }

  // Keeps the helpers off the caller's CPU, where a woken helper can only take turns with
  // the caller. The kernel of the 2-vCPU EPYC VM of 2026-12-07 (kernel.sched_vcpu_pack)
  // put a thread woken after an idle spell on its waker's vCPU in 292 of 303 wake-ups
  // (benchmarks/native/wake_cost.c). Allowed every CPU the caller may use but its own, it
  // put none there, and 300 us of arithmetic split with the woken helper ran 1.55x faster
  // than on one thread, against 0.93x. One system call a helper, made again only when the
  // caller's CPU or its affinity has changed. A caller that may run on one CPU only
  // leaves the helpers where they are. A pool of more than kMaxSteeredHelpers helpers gets
  // the caller's whole affinity instead (once): there a caller that moves between CPUs
  // would pay a call for each helper at each wake-up (about 2.5 us a call on the VM), more
  // than the work a wake-up is made for. Called under mutex_.
  void steer_helpers() {
    constexpr size_t kMaxSteeredHelpers = 15;
    const int cpu = sched_getcpu();
    cpu_set_t allowed;
    if (cpu < 0 || cpu >= CPU_SETSIZE || pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed) != 0) return;
    cpu_set_t others = allowed;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) == 0) return;
    const cpu_set_t& wanted = handles_.size() <= kMaxSteeredHelpers ? others : allowed;
    if (steered_workers_ == handles_.size() && CPU_EQUAL(&wanted, &steered_to_)) return;
    for (pthread_t helper : handles_) pthread_setaffinity_np(helper, sizeof wanted, &wanted);
    steered_to_ = wanted;
    steered_workers_ = handles_.size();
  }

  void worker_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      Job* job = open_job();
      if (job == nullptr) {
        // Poll for a new job (kHelperPoll), then sleep. `sleeping_` changes under the lock
        // that run() reads it under, after a last look for a job: no post goes unseen.
        const uint64_t seen = posted_.load(std::memory_order_relaxed);
        lock.unlock();
        const auto deadline = std::chrono::steady_clock::now() + kHelperPoll;
        while (posted_.load(std::memory_order_acquire) == seen &&
               std::chrono::steady_clock::now() < deadline) {
          for (int i = 0; i < 16; ++i) cpu_relax();
          sched_yield();
        }
        lock.lock();
        job = open_job();
        if (job == nullptr) {
          ++sleeping_;
          wake_.wait(lock, [&] { return (job = open_job()) != nullptr; });
          --sleeping_;
        }
      }
      ++job->helpers_joined;
      {
        std::lock_guard<std::mutex> active(job->done_mutex);
        ++job->helpers_active;
      }
      lock.unlock();
      job->work();
      {
        std::lock_guard<std::mutex> active(job->done_mutex);
        --job->helpers_active;
        job->done.notify_all();
      }
      lock.lock();
    }
  }

  // A job that a helper may join (called under mutex_), or nullptr.
  Job* open_job() {
    for (Job* j : jobs_) {
      if (j->helpers_joined < j->helpers_wanted &&
          j->next.load(std::memory_order_relaxed) < j->num_chunks) {
        return j;
      }
    }
    return nullptr;
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job*> jobs_;
  int workers_ = 0;  // started, detached threads running worker_loop
  std::vector<pthread_t> handles_;  // theirs (they never exit)
  // The CPUs every helper was last allowed (steer_helpers), and how many helpers then.
  cpu_set_t steered_to_{};
  size_t steered_workers_ = 0;
  int sleeping_ = 0;  // workers waiting on wake_ (guarded by mutex_)
  std::atomic<uint64_t> posted_{0};  // jobs posted so far: what polling workers watch
  // When the last job ended (ticks_now()): a job posted soon after is one of a stream.
  std::atomic<std::chrono::steady_clock::rep> last_end_{0};
};

Pool& pool() {
  static Pool* instance = new Pool();
  return *instance;
}

// Runs the chunks on the calling thread alone (threads <= 1) or as a job of the pool.
void run_chunks(int64_t num_chunks, ChunkBody body, int64_t threads, std::chrono::microseconds min_wake) {
  if (threads <= 1) {
    for (int64_t c = 0; c < num_chunks; ++c) body(c);
    return;
  }
  Pool& workers = pool();
  if (min_wake.count() > 0 && !workers.in_stream()) {
    // Every helper sleeps (they poll for kHelperPoll < kStreamGap after a job) and is woken
    // only when the chunks left after the caller's first, timed, pay for it (min_wake).
    // Decided before a job exists: one too small runs on the caller alone, as on one
    // thread, without the job's cache lines, the pool's mutex, queue and waits. From
    // evicted caches the pool's misses made such calls 2-3% slower than on one thread
    // (cold feedbackMask of 1M tokens on the EPYC VM of 2026-12-07: 0.967x), and making the
    // job first about 1% (cold dpoLoss of 32,768 pairs, on the caller alone either way:
    // 0.977-0.980x, and 0.988-0.993x without; paired medians of 151 rounds).
    const double seconds = Job::timed_chunk(body, 0);
    if (seconds * static_cast<double>(num_chunks - 1) < std::chrono::duration<double>(min_wake).count()) {
      for (int64_t c = 1; c < num_chunks; ++c) body(c);
      workers.ran_alone();
      return;
    }
    Job job(body, num_chunks, static_cast<int>(threads - 1));
    job.next.store(1, std::memory_order_relaxed);
    job.first_claim_ran(0, seconds);
    workers.run(job, /*first_ran=*/true);
    return;
  }
  Job job(body, num_chunks, static_cast<int>(threads - 1));
  workers.run(job, /*first_ran=*/false);
}

}  // namespace

int num_threads() { return configured_threads.load(std::memory_order_relaxed); }

bool set_num_threads(int n) {
  if (n < 1 || n > 1024) return false;
  configured_threads.store(n, std::memory_order_relaxed);
  return true;
}

void parallel_for(int64_t num_chunks, ChunkBody body, int64_t min_chunks_per_thread, Scaling scaling) {
  if (num_chunks <= 0) return;
  const int64_t worth = num_chunks / std::max<int64_t>(1, min_chunks_per_thread);
  run_chunks(num_chunks, body, std::min<int64_t>(num_threads(), worth),
             scaling == Scaling::kMemory ? kMinWakeWorkMemoryBound : kMinWakeWork);
}

void parallel_parts(int64_t num_parts, ChunkBody body) {
  if (num_parts <= 0) return;
  run_chunks(num_parts, body, std::min<int64_t>(num_threads(), num_parts), std::chrono::microseconds{0});
}

}  // namespace tirl

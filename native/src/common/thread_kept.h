// Scratch kept by each calling thread between calls.
#pragma once

#include <cstddef>
#include <vector>

namespace tirl {

// The calling thread's buffer of at least `count` Ts, kept between calls: grown (new
// elements value-initialised), never shrunk. A call that took its scratch from fresh
// pages would pay a page fault per 4 KiB every time, which for the short ops costs more
// than their work. `Use` names what the buffer is for (an empty struct): two uses of one
// T never share a buffer, even inside one call. The pointer stays valid until the same
// thread asks for more Ts of the same use.
// Growing the buffer can throw std::bad_alloc. The body of a parallel_for (common/parallel.h)
// must not throw: one that calls this catches bad_alloc itself, and the caller rethrows it
// after the parallel_for (see cpu/group_advantages.cc, cpu/advantages.cc,
// cpu/token_logprobs.cc).
template <class Use, class T>
T* thread_kept(size_t count) {
  thread_local std::vector<T> kept;
  if (kept.size() < count) kept.resize(count);
  return kept.data();
}

}  // namespace tirl

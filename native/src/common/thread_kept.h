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
template <class Use, class T>
T* thread_kept(size_t count) {
  thread_local std::vector<T> kept;
  if (kept.size() < count) kept.resize(count);
  return kept.data();
}

}  // namespace tirl

#pragma once
// Test seam (the model-based core test): a scheduler that must know when a thread stops to wait
// for another thread. Every place in the core where a caller's thread blocks behind another
// thread's statement (the combiner, the write-behind queue, a name's gate) runs these.

#include <functional>

namespace dblock::detail {

/// `parked` runs on the waiting thread before it blocks; `resumed` runs on the thread that wakes
/// it, before the wake-up, so the scheduler sees no gap.
struct ParkHooks {
  std::function<void()> parked;
  std::function<void()> resumed;
};
inline thread_local const ParkHooks* park_hooks = nullptr;

}  // namespace dblock::detail

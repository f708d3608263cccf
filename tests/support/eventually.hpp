#pragma once
// Awaiting a condition in tests: polled with a bound, never a bare sleep standing in for it.

#include <chrono>
#include <thread>

namespace dblock::test {

/// Waits until `predicate` holds or `limit` passes; returns whether it held.
template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return predicate();
}

}  // namespace dblock::test

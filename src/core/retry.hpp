#pragma once
// The one retry policy: run a statement again only on errors the backend classified as transient
// (deadlock, serialization failure, busy database), a few times with a short growing pause; never
// on anything else (usage errors, unknown outcomes, broken connections).

#include <chrono>
#include <thread>

#include "backends/backend_errors.hpp"

namespace dblock::detail {

inline constexpr int kTransientAttempts = 5;

/// `on_retry` runs before each repeat (e.g. to count it).
template <class Fn, class OnRetry>
auto retry_transient(Fn&& statement, OnRetry&& on_retry) {
  for (int attempt = 1;; ++attempt) {
    try {
      return statement();
    } catch (const TransientError&) {
      if (attempt == kTransientAttempts) throw;
      on_retry();
      std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
    }
  }
}

template <class Fn>
auto retry_transient(Fn&& statement) {
  return retry_transient(std::forward<Fn>(statement), [] {});
}

}  // namespace dblock::detail

#pragma once
// The one retry policy: run a statement again only on errors the backend classified as transient
// (deadlock, serialization failure, busy database), a few times with a short growing pause; and a
// statement safe to repeat once more when its reply was lost. Never on anything else (usage
// errors, broken connections, unknown outcomes of statements that change state).

#include <algorithm>
#include <chrono>
#include <thread>

#include "backends/backend_errors.hpp"

namespace dblock::detail {

inline constexpr int kTransientAttempts = 5;
/// A release that fails leaves its lock (or a group's place) taken until the lease ends, so it
/// tries harder: 12 attempts, about half a second in all.
inline constexpr int kReleaseAttempts = 12;

/// `on_retry` runs before each repeat (e.g. to count it). Pauses 2, 4, 8, ... ms, at most 64.
template <class Fn, class OnRetry>
auto retry_transient(Fn&& statement, OnRetry&& on_retry, int attempts = kTransientAttempts) {
  for (int attempt = 1;; ++attempt) {
    try {
      return statement();
    } catch (const TransientError&) {
      if (attempt >= attempts) throw;
      on_retry();
      std::this_thread::sleep_for(std::chrono::milliseconds(1 << std::min(attempt, 6)));
    }
  }
}

template <class Fn>
auto retry_transient(Fn&& statement) {
  return retry_transient(std::forward<Fn>(statement), [] {});
}

/// For statements safe to run twice (reads, renewals): one whose reply was lost (OutcomeUnknown)
/// runs once more. Each backend call leases its own session and the pool never takes back one that
/// lost a reply, so the repeat goes out on another. Statements that change state by more than
/// they read (acquire, release) are resolved by reading instead (table_core.cpp), never repeated.
template <class Fn>
auto repeat_if_reply_lost(Fn&& statement) {
  try {
    return statement();
  } catch (const OutcomeUnknown&) {
    return statement();
  }
}

/// A read's whole policy: transient errors retried, a lost reply asked again once.
template <class Fn>
auto retry_read(Fn&& statement) {
  return retry_transient([&] { return repeat_if_reply_lost(statement); });
}

}  // namespace dblock::detail

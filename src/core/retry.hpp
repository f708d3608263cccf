#pragma once
// The one retry policy: run a statement again only on errors the backend classified as transient
// (deadlock, serialization failure, busy database), a few times with a short growing pause; and a
// statement safe to repeat once more when its reply was lost. Never on anything else (usage
// errors, broken connections, unknown outcomes of statements that change state).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>

#include "backends/backend_errors.hpp"

namespace dblock::detail {

/// What a waiter waits out and tries again after: the database unreachable (the pool reconnects),
/// an outcome that stayed unknown (not held by the waiter: its lease lapses), a conflict that
/// outlasted its retries (nothing was granted). Anything else ends the wait.
inline bool waiter_rides_out(const Error& e) {
  return dynamic_cast<const ConnectionError*>(&e) != nullptr || dynamic_cast<const TransientError*>(&e) != nullptr;
}

inline constexpr int kTransientAttempts = 5;
/// A release that fails leaves its lock (or a group's place) taken until the lease ends, so it
/// tries harder: for up to 5 s, not a number of attempts. On a loaded Galera cluster beside a busy
/// reaper, one release met 12 certification conflicts in a row (half a second of pauses).
inline constexpr std::chrono::seconds kReleaseRetryTime{5};

/// The pause before repeat `attempt` (1, 2, ...): 2, 4, 8, ... ms, at most 64, less a part of it
/// that differs by thread and attempt, so that two sessions that conflicted once do not come back
/// in step and conflict again (a deadlock's or a certification conflict's loser retries at once).
inline std::chrono::microseconds transient_pause(int attempt) {
  std::chrono::microseconds full = std::chrono::milliseconds(1 << std::min(attempt, 6));
  auto spread = std::hash<std::thread::id>{}(std::this_thread::get_id()) * 0x9E3779B97F4A7C15ull +
                static_cast<std::size_t>(attempt) * 0xBF58476D1CE4E5B9ull;
  return full - full * static_cast<std::int64_t>((spread >> 33) % 512) / 1024;  // 50-100 % of it
}

/// `on_retry` runs before each repeat (e.g. to count it). Pauses as transient_pause says.
template <class Fn, class OnRetry>
auto retry_transient(Fn&& statement, OnRetry&& on_retry, int attempts = kTransientAttempts) {
  for (int attempt = 1;; ++attempt) {
    try {
      return statement();
    } catch (const TransientError&) {
      if (attempt >= attempts) throw;
      on_retry();
      std::this_thread::sleep_for(transient_pause(attempt));
    }
  }
}

/// retry_transient bounded by time instead of attempts: the last repeat starts before `limit` has
/// passed since the first. Measured on the steady clock.
template <class Fn, class OnRetry>
auto retry_transient_for(Fn&& statement, OnRetry&& on_retry, std::chrono::steady_clock::duration limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  for (int attempt = 1;; ++attempt) {
    try {
      return statement();
    } catch (const TransientError&) {
      auto pause = transient_pause(attempt);
      if (std::chrono::steady_clock::now() + pause >= until) throw;
      on_retry();
      std::this_thread::sleep_for(pause);
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

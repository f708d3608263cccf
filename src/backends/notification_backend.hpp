#pragma once
// The notification role of a backend: releases reported to waiters as they happen (PostgreSQL's
// LISTEN/NOTIFY), so that a waiter need not poll. A database without it is simply polled.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dblock::detail {

using std::chrono::milliseconds;

/// A fair-queue grant as the release that made it reports it: the waiter (its owner, and its waiter
/// row's seq, which no later wait of that owner has) and the grant's token. One level, the waiter's
/// TTL from the release's commit or before it.
struct HandedGrant {
  std::string owner;
  std::int64_t seq = 0;
  std::int64_t token = 0;
};

/// A release a listener reports. `grant`: the release handed the name to that queued waiter; the
/// same release is also reported plainly (without it), for waiters that do not read grants.
struct ReleaseNotice {
  std::string name;
  std::optional<HandedGrant> grant;
};

/// Wakes waiters when a name is released. Used by one thread at a time, except interrupt().
class ReleaseListener {
 public:
  virtual ~ReleaseListener() = default;
  /// From now on releases of `name` are reported (and releasers know someone waits).
  virtual void watch(std::string_view name) = 0;
  virtual void unwatch(std::string_view name) = 0;
  /// Blocks up to `timeout` (or until interrupt()) and returns the releases reported meanwhile, in
  /// the order they were sent.
  /// @throws ConnectionError when the listening session broke: notifications may have been missed.
  virtual std::vector<ReleaseNotice> wait(milliseconds timeout) = 0;
  /// Thread-safe: makes a concurrent or the next wait() return at once.
  virtual void interrupt() noexcept = 0;
};

class NotificationBackend {
 public:
  virtual ~NotificationBackend() = default;
  /// A listener on a session of its own, or nullptr when notifications turn out not to work here
  /// after all (PostgreSQL behind a transaction pooler, found out at run time): waiters poll then.
  virtual std::unique_ptr<ReleaseListener> listen() = 0;
};

}  // namespace dblock::detail

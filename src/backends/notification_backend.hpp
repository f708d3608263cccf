#pragma once
// The notification role of a backend: releases reported to waiters as they happen (PostgreSQL's
// LISTEN/NOTIFY), so that a waiter need not poll. A database without it is simply polled.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dblock::detail {

using std::chrono::milliseconds;

/// Wakes waiters when a name is released. Used by one thread at a time, except interrupt().
class ReleaseListener {
 public:
  virtual ~ReleaseListener() = default;
  /// From now on releases of `name` are reported (and releasers know someone waits).
  virtual void watch(std::string_view name) = 0;
  virtual void unwatch(std::string_view name) = 0;
  /// Blocks up to `timeout` (or until interrupt()) and returns the names released meanwhile.
  /// @throws ConnectionError when the listening session broke: notifications may have been missed.
  virtual std::vector<std::string> wait(milliseconds timeout) = 0;
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

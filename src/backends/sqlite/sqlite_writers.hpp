#pragma once
// SQLite lets one writer at a time into a file. Its busy handler makes the others sleep and retry
// (1, 2, 5, 10 ... ms), so sixteen threads writing at once spend most of their time asleep while
// the file is free. This backend's writers therefore take turns on a mutex first: a writer of
// this process waits for the one before it and is woken when it is done. Writers of other
// processes still meet in SQLite's busy handler.

#include <chrono>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "backends/backend_errors.hpp"

namespace dblock::detail {

/// Thread-safe; one per backend (its sessions share it).
class SqliteWriters {
 public:
  explicit SqliteWriters(std::chrono::milliseconds busy_timeout) : busy_timeout_(busy_timeout) {}

  /// Held while one write runs. @throws TransientError, as SQLite's own busy answer, when the
  /// writers before it keep the file for longer than the busy timeout.
  std::unique_lock<std::timed_mutex> turn(std::string_view what, std::string_view path) {
    std::unique_lock turn(mutex_, std::defer_lock);
    if (!turn.try_lock_for(busy_timeout_))
      throw TransientError(fmt::format("{} on sqlite://{}: database is locked (this process's other writers kept "
                                       "it for the busy timeout, {} ms)",
                                       what, path, busy_timeout_.count()));
    return turn;
  }

 private:
  std::chrono::milliseconds busy_timeout_;
  std::timed_mutex mutex_;
};

}  // namespace dblock::detail

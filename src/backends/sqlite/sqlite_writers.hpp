#pragma once
// SQLite lets one writer at a time into a file. Its busy handler makes the others sleep and retry
// (1, 2, 5, 10 ... ms), so sixteen threads writing at once spend most of their time asleep while
// the file is free. With `writers=queued` this backend's writers therefore take turns first, in
// the order they came: a writer of this process waits for the ones before it and is handed the
// turn when they are done, so no writer (a renewal included) waits behind a stream of newcomers.
// Writers of other processes (and of other stores on the same file) still meet in SQLite's busy
// handler. Not the default: with two to four threads, handing the turn to a sleeping thread costs
// more than the rare collisions in SQLite do (doc/performance.md, "SQLite: writers take turns").

#include <chrono>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "backends/backend_errors.hpp"
#include "base/fifo_turn.hpp"

namespace dblock::detail {

/// Thread-safe; one per backend (its sessions share it).
class SqliteWriters {
 public:
  /// Held while one write runs; hands the turn to the first waiter when destroyed.
  class Turn {
   public:
    explicit Turn(SqliteWriters* writers) : writers_(writers) {}
    ~Turn() {
      if (writers_ != nullptr) writers_->hand_on();
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    SqliteWriters* writers_;  // nullptr: writers do not queue
  };

  /// `queued` false: every turn is taken at once (SQLite's busy handler alone decides).
  SqliteWriters(std::chrono::milliseconds busy_timeout, bool queued) : busy_timeout_(busy_timeout), queued_(queued) {}

  [[nodiscard]] bool queued() const noexcept { return queued_; }

  /// Waits for the writers that came before. @throws TransientError, as SQLite's own busy answer,
  /// when they keep the file for longer than the busy timeout.
  [[nodiscard]] Turn turn(std::string_view what, std::string_view path) {
    if (!queued_) return Turn(nullptr);
    std::unique_lock lock(mutex_);
    if (turn_.try_take()) return Turn(this);
    FifoTurn<>::Waiter me;
    turn_.queue(me);
    if (!turn_.wait_for(lock, me, busy_timeout_)) {
      throw TransientError(
          fmt::format("{} on sqlite://{}: database is locked (this process's other writers kept "
                      "it for the busy timeout, {} ms)",
                      what, path, busy_timeout_.count()));
    }
    return Turn(this);
  }

 private:
  void hand_on() {
    std::lock_guard lock(mutex_);
    turn_.hand_on();
  }

  std::chrono::milliseconds busy_timeout_;
  bool queued_;
  std::mutex mutex_;
  FifoTurn<> turn_;
};

}  // namespace dblock::detail

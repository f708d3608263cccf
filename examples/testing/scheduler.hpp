#pragma once
// The code under test in scheduler_test.cpp: a scheduler that dispatches work only while this
// process leads, and steps down (stops dispatching, tells its owner) the moment its term ends.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <dblock/dblock.hpp>

class Scheduler {
 public:
  /// `on_leading(true|false)`: called when this process starts or stops leading (on dblock's threads).
  Scheduler(std::shared_ptr<dblock::Store> store, std::function<void(bool)> on_leading)
      : on_leading_(std::move(on_leading)), election_(std::move(store), "scheduler", options()) {}

  /// Dispatches `job` if this process leads; returns whether it did.
  bool dispatch(const std::function<void()>& job) {
    if (!election_.is_leader()) return false;
    job();
    return true;
  }

 private:
  dblock::ElectionOptions options() {
    dblock::ElectionOptions options;
    options.on_elected = [this](std::int64_t) { on_leading_(true); };
    options.on_revoked = [this] { on_leading_(false); };
    return options;
  }

  std::function<void(bool)> on_leading_;
  dblock::LeaderElection election_;  // last: its threads stop before the callback goes
};

#pragma once
// The code under test in export_job_test.cpp: an export that writes its rows in steps while it
// holds the lock "export", and stops between two steps once the lock is lost, through the lock's
// stop token (C++20 cooperative cancellation). Nothing here knows about tests.

#include <functional>
#include <memory>
#include <utility>

#include <dblock/dblock.hpp>

class ExportJob {
 public:
  /// `write_step` writes one step's rows; a real job would fence it with the lock's token.
  ExportJob(std::shared_ptr<dblock::Store> store, std::function<void(int step)> write_step,
            dblock::ManagerOptions options = {})
      : locks_(std::move(store), std::move(options)), write_step_(std::move(write_step)) {}

  /// Runs up to `steps` steps while holding the lock; returns how many ran (0: another host has it).
  int run(int steps) {
    auto lock = locks_.try_acquire("export");
    if (!lock) return 0;
    auto stop = lock->stop_token();
    int done = 0;
    while (done < steps && !stop.stop_requested()) write_step_(done++);
    return done;
  }

 private:
  dblock::LockManager locks_;
  std::function<void(int)> write_step_;
};

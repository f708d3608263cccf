#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include "dblock/bench_harness.hpp"

namespace dblock::cli {

/// --scenario async: `waiters` tasks, each taking one of `names` locks once (waiting as long as it
/// takes) and releasing it at once; `asynchronous`: coroutines of an AsyncLockManager on two
/// threads, else a thread each on a LockManager. Grants per second, the hand-off latency (a
/// release to the next grant of that name), and the threads and memory the process used.
Result bench_waiters(const std::shared_ptr<Store>& store, LockMode mode, std::size_t waiters, std::size_t names,
                     bool asynchronous);

}  // namespace dblock::cli

#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <dblock/store.hpp>

namespace dblock::cli {

struct BenchRequest {
  std::string scenario = "all";  // uncontended, handoff, renew, reap, fence, scale, async, work, names, all
  std::string mode = "table";
  std::string kind = "lock";  // uncontended: lock, permit (of a semaphore of 2) or shared (a read lock)
  std::size_t threads = 0;    // 0: the scenario's defaults (uncontended: 1 and 16; handoff: 4)
  std::chrono::milliseconds duration{5000};
  std::size_t renew_locks = 0;  // 0: 1,000 and 10,000
  std::size_t reap_rows = 100'000;
  std::size_t reap_batch = 10'000;
  bool json = false;
  bool combine = true;        // ManagerOptions::combine_requests of the library's managers
  bool write_behind = false;  // ManagerOptions::write_behind_releases
  bool fair_queue = false;    // ManagerOptions::fair_queue
};

/// `dblock bench`: every figure next to its raw-driver floor measured in the same run.
int run_bench(const BenchRequest& request, const std::shared_ptr<Store>& store);

}  // namespace dblock::cli

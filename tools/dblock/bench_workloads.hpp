#pragma once
// The workloads published lock benchmarks use, each beside the hand-written SQL a user would
// write, in the same run: work while holding (`--scenario work`) and many names (`--scenario names`).

#include <memory>
#include <string>
#include <vector>

#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include "core/bench_floor.hpp"
#include "dblock/bench_command.hpp"
#include "dblock/bench_harness.hpp"

namespace dblock::cli {

/// `--scenario work`: a fixed 1 ms of work inside each lock, on names drawn at random from ten per
/// thread, at 16 and 200 threads (or --threads). `--scenario names`: an acquisition and a release
/// on a name drawn at random from 10,000, at 16 threads (or --threads). Table mode. Every try counts
/// as an operation on both sides, refused ones too (their share is printed: the hand-written side's
/// is the larger, so the ratio errs in its favour). The hand-written side shares a pool of at most
/// 32 bare connections among its threads, as an application would.
std::vector<Result> bench_workload(const BenchRequest& request, const std::shared_ptr<Store>& store,
                                   dblock::detail::BenchFloor& floor, const ManagerOptions& options,
                                   const std::string& run_id);

}  // namespace dblock::cli

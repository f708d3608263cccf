#include "dblock/bench_workloads.hpp"

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <dblock/dblock.hpp>

namespace dblock::cli {

namespace {

using dblock::detail::RawLockClient;

/// Bare connections shared by more threads than there are connections, as an application shares
/// its pool: a thread borrows one for a statement and gives it back.
class RawClientPool {
 public:
  RawClientPool(dblock::detail::BenchFloor& floor, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i)
      if (auto client = floor.hand_written_client(dblock::detail::HandWritten::synchronous))
        clients_.push_back(std::move(client));
    for (auto& client : clients_) free_.push_back(client.get());
  }
  [[nodiscard]] bool complete(std::size_t size) const { return clients_.size() == size; }

  /// Runs `use(client)` on a borrowed client.
  template <class Use>
  auto with_client(Use use) {
    RawLockClient* client = nullptr;
    {
      std::unique_lock lock(mutex_);
      returned_.wait(lock, [&] { return !free_.empty(); });
      client = free_.back();
      free_.pop_back();
    }
    struct GiveBack {
      RawClientPool& pool;
      RawLockClient* client;
      ~GiveBack() {
        {
          std::lock_guard lock(pool.mutex_);
          pool.free_.push_back(client);
        }
        pool.returned_.notify_one();
      }
    } give_back{*this, client};
    return use(*client);
  }

 private:
  std::vector<std::unique_ptr<RawLockClient>> clients_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<RawLockClient*> free_;  // guarded by mutex_
};

struct Workload {
  std::string scenario;
  std::size_t threads;
  std::size_t names;
  std::chrono::microseconds work;
};

/// A thread's random draws: seeded by its index, so a run repeats its sequence.
class Draws {
 public:
  Draws(std::size_t threads, std::size_t names) : names_(names) {
    for (std::size_t t = 0; t < threads; ++t) engines_.emplace_back(static_cast<unsigned>(t + 1));
  }
  std::size_t next(std::size_t thread) {
    return std::uniform_int_distribution<std::size_t>(0, names_ - 1)(engines_[thread]);
  }

 private:
  std::size_t names_;
  std::vector<std::minstd_rand> engines_;
};

Result measure(const Workload& workload, const BenchRequest& request, const std::shared_ptr<Store>& store,
               dblock::detail::BenchFloor& floor, const ManagerOptions& options, const std::string& run_id) {
  // As an application's pool: at most 32 connections, however many threads share them.
  auto pool_size = std::min<std::size_t>(workload.threads, 32);
  RawClientPool hand(floor, pool_size);
  if (!hand.complete(pool_size))
    throw InvalidArgument(fmt::format("--scenario {}: no hand-written SQL on {}", workload.scenario, store->dialect()));
  LockManager locks(store, options);
  Draws library_draws(workload.threads, workload.names), hand_draws(workload.threads, workload.names);
  std::atomic<std::size_t> library_refused{0}, hand_refused{0}, library_tries{0}, hand_tries{0};
  auto work = [&] {
    if (workload.work.count() > 0) std::this_thread::sleep_for(workload.work);  // the work itself
  };
  auto library = [&](std::size_t t, Latencies& latencies) {
    auto name = fmt::format("{}/{}/{}", run_id, workload.scenario, library_draws.next(t));
    auto started = Clock::now();
    ++library_tries;
    if (auto lock = locks.try_acquire(name)) {
      work();
      lock->release();
      latencies.add(Clock::now() - started);
    } else {
      ++library_refused;
    }
  };
  auto hand_written = [&](std::size_t t, Latencies& latencies) {
    auto name = fmt::format("{}/{}/h/{}", run_id, workload.scenario, hand_draws.next(t));
    auto owner = fmt::format("{}/hand/{}", run_id, t);
    auto started = Clock::now();
    ++hand_tries;
    auto token = hand.with_client([&](RawLockClient& client) { return client.acquire(name, owner, 30'000); });
    if (token) {
      work();
      hand.with_client([&](RawLockClient& client) { return client.release(name, owner, *token); });
      latencies.add(Clock::now() - started);
    } else {
      ++hand_refused;
    }
  };
  auto comparison = compare(workload.threads, request.duration, hand_written, library);
  auto share = [](std::size_t part, std::size_t whole) {
    return fmt::format("{:.1f}", whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  };
  Result result{
      workload.scenario, request.mode,
      workload.threads,  comparison.library,
      comparison.floor,  "hand-written SQL (upsert + DELETE), raw driver, a pool of " + std::to_string(pool_size),
      comparison.ratio,  {}};
  result.extra["ratio_of"] = "median of 8 alternating pairs";
  result.extra["unit"] = workload.work.count() > 0 ? "tries, each granted one held for 1 ms of work"
                                                   : "tries, each granted one released at once";
  result.extra["names"] = std::to_string(workload.names);
  result.extra["refused_pct"] = share(library_refused, library_tries);
  result.extra["hand_written_refused_pct"] = share(hand_refused, hand_tries);
  return result;
}

}  // namespace

std::vector<Result> bench_workload(const BenchRequest& request, const std::shared_ptr<Store>& store,
                                   dblock::detail::BenchFloor& floor, const ManagerOptions& options,
                                   const std::string& run_id) {
  if (request.mode != "table")
    throw InvalidArgument(
        fmt::format("--scenario {} compares with hand-written SQL: table mode only", request.scenario));
  std::vector<Workload> workloads;
  if (request.scenario == "work") {
    for (std::size_t threads :
         request.threads != 0 ? std::vector<std::size_t>{request.threads} : std::vector<std::size_t>{16, 200})
      workloads.push_back({"work", threads, 10 * threads, std::chrono::milliseconds(1)});
  } else {
    workloads.push_back({"names", request.threads != 0 ? request.threads : 16, 10'000, {}});
  }
  std::vector<Result> results;
  for (auto& workload : workloads) results.push_back(measure(workload, request, store, floor, options, run_id));
  return results;
}

}  // namespace dblock::cli

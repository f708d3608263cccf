#include "dblock/bench_async.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <asio.hpp>
#include <dblock/asio.hpp>
#include <dblock/dblock.hpp>

namespace dblock::cli {

namespace {

std::size_t thread_count() {
  std::size_t count = 0;
  for ([[maybe_unused]] auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

/// What the waiters of one run share: when each name was last released, the hand-offs seen, and
/// the peaks of threads and memory sampled at each grant.
class Tally {
 public:
  explicit Tally(std::size_t names) : released_(names) {}

  void granted(std::size_t name) {
    auto now = Clock::now().time_since_epoch().count();
    auto last = released_[name].load();
    std::lock_guard lock(mutex_);
    if (last != 0 && now > last) handoffs_.add(Clock::duration(now - last));
    if (++grants_ % 64 == 0) sample();
  }
  void released(std::size_t name) { released_[name] = Clock::now().time_since_epoch().count(); }
  void sample() {
    most_threads_ = std::max(most_threads_, thread_count());
    most_mib_ = std::max(most_mib_, resident_mib());
  }
  [[nodiscard]] std::size_t grants() const { return grants_; }
  Latencies& handoffs() { return handoffs_; }
  [[nodiscard]] std::size_t most_threads() const { return most_threads_; }
  [[nodiscard]] double most_mib() const { return most_mib_; }

 private:
  std::vector<std::atomic<Clock::rep>> released_;
  std::mutex mutex_;
  Latencies handoffs_;
  std::size_t grants_ = 0;
  std::size_t most_threads_ = 0;
  double most_mib_ = 0;
};

}  // namespace

Result bench_waiters(const std::shared_ptr<Store>& store, LockMode mode, std::size_t waiters, std::size_t names,
                     bool asynchronous) {
  auto run_id = fmt::format("bench/{}/w", getpid());
  auto name_of = [&](std::size_t i) { return fmt::format("{}/{}", run_id, i % names); };
  Tally tally(names);
  auto threads_before = thread_count();
  auto mib_before = resident_mib();
  std::atomic<std::size_t> failed{0};
  auto started = Clock::now();
  if (asynchronous) {
    asio::io_context io;
    AsyncLockManager locks(io.get_executor(), store, {.mode = mode}, {.threads = 2});
    for (std::size_t i = 0; i < waiters; ++i)
      asio::co_spawn(
          io,
          [&, i]() -> asio::awaitable<void> {
            auto lock = co_await locks.async_acquire(name_of(i), wait_forever, asio::use_awaitable);
            tally.granted(i % names);
            tally.released(i % names);  // the release starts now: the next grant's hand-off runs from here
            co_await locks.async_release(std::move(lock), asio::use_awaitable);
          },
          [&](std::exception_ptr error) {
            if (error) ++failed;
          });
    tally.sample();
    std::jthread second([&] { io.run(); });
    io.run();
  } else {
    LockManager locks(store, {.mode = mode});
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < waiters; ++i)
      threads.emplace_back([&, i] {
        try {
          auto lock = locks.acquire(name_of(i), wait_forever);
          tally.granted(i % names);
          tally.released(i % names);
          lock.release();
        } catch (const Error&) {
          ++failed;
        }
      });
    tally.sample();
  }
  auto elapsed = Clock::now() - started;
  Result result{asynchronous ? "async" : "async-sync",
                mode == LockMode::advisory ? "advisory" : "table",
                waiters,
                figure_of(tally.handoffs(), tally.grants(), elapsed),
                std::nullopt,
                {},
                std::nullopt,
                {}};
  result.extra["names"] = std::to_string(names);
  result.extra["grants"] = std::to_string(tally.grants());
  result.extra["failed"] = std::to_string(failed.load());
  result.extra["unit"] = "grants/s; p50/p99: a release to the next grant of its name";
  result.extra["threads_added"] = std::to_string(tally.most_threads() - std::min(tally.most_threads(), threads_before));
  result.extra["peak_rss_mib_added"] = fmt::format("{:.1f}", std::max(0.0, tally.most_mib() - mib_before));
  result.extra["served_by"] = asynchronous ? "2 io threads + 2 statement threads" : "a thread per waiter";
  return result;
}

}  // namespace dblock::cli

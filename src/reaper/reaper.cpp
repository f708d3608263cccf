#include <dblock/reaper.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/lock_backend.hpp"
#include "backends/occurrence_backend.hpp"
#include "backends/queue_backend.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"

namespace dblock {

struct Reaper::State {
  std::shared_ptr<Store> store;
  ReaperOptions options;
  std::atomic<std::uint64_t> rows{0}, cycles{0}, failures{0}, consecutive_failures{0};
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable_any wake;
  std::jthread thread;

  ReapCycle cycle() {
    auto& roles = detail::StoreParts::backend(*store);
    detail::LockBackend& backend = roles.locks();
    auto& logger = *detail::StoreParts::logger(*store);
    ReapCycle result;
    auto started = std::chrono::steady_clock::now();
    try {
      while (!stopping) {
        auto deleted = detail::retry_transient([&] { return backend.reap(options.batch_size); });
        result.rows += deleted;
        ++result.batches;
        if (deleted < options.batch_size) break;
      }
      // Occurrence records kept long enough: logged, not counted as reaped locks.
      if (auto* occurrences = roles.occurrences().get_if()) {
        std::size_t cleared = 0;
        for (std::size_t deleted = options.batch_size; deleted == options.batch_size && !stopping;) {
          deleted = detail::retry_transient([&] { return occurrences->reap(options.batch_size); });
          cleared += deleted;
        }
        if (cleared > 0) logger.info("cleared {} old occurrence record(s)", cleared);
      }
      // Waiters whose waiter lease ended (the fair queue's dead waiters): logged, not counted as locks.
      if (auto* queue = roles.queue().get_if()) {
        std::size_t cleared = 0;
        for (std::size_t deleted = options.batch_size; deleted == options.batch_size && !stopping;) {
          deleted = detail::retry_transient([&] { return queue->reap_waiters(options.batch_size); });
          cleared += deleted;
        }
        if (cleared > 0) logger.info("cleared {} dead waiter(s) from the queue", cleared);
      }
    } catch (const std::exception& e) {
      result.ok = false;
      result.error = e.what();
    }
    result.duration = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
    rows += result.rows;
    ++cycles;
    if (result.ok) {
      consecutive_failures = 0;
      if (result.rows > 0) logger.info("reaped {} expired lock(s) in {} batch(es)", result.rows, result.batches);
    } else {
      ++failures;
      ++consecutive_failures;
      logger.warn("reaper cycle failed ({} in a row): {}", consecutive_failures.load(), result.error);
    }
    if (options.on_cycle) options.on_cycle(result);
    return result;
  }

  void run(std::stop_token stop) {
    std::mt19937_64 random(std::random_device{}());
    auto retry = options.retry_delay;
    while (!stop.stop_requested()) {
      auto result = cycle();
      std::chrono::milliseconds pause;
      if (result.ok) {
        std::uniform_real_distribution<double> spread(1.0 - options.jitter, 1.0 + options.jitter);
        pause = std::chrono::milliseconds(
            static_cast<std::int64_t>(static_cast<double>(options.interval.count()) * spread(random)));
        retry = options.retry_delay;
      } else {
        pause = retry;
        retry = std::min(retry * 2, options.interval);
      }
      std::unique_lock lock(mutex);
      wake.wait_for(lock, stop, pause, [] { return false; });
    }
  }
};

Reaper::Reaper(std::shared_ptr<Store> store, ReaperOptions options) : state_(std::make_shared<State>()) {
  if (!store) throw InvalidArgument("Reaper needs a Store (got a null pointer)");
  if (options.interval.count() <= 0) throw InvalidArgument("ReaperOptions.interval must be positive");
  if (options.batch_size == 0 || options.batch_size > 1'000'000)
    throw InvalidArgument(fmt::format("ReaperOptions.batch_size {} must be 1..1000000", options.batch_size));
  if (options.jitter < 0.0 || options.jitter >= 1.0) throw InvalidArgument("ReaperOptions.jitter must be in [0, 1)");
  if (options.retry_delay.count() <= 0) throw InvalidArgument("ReaperOptions.retry_delay must be positive");
  state_->store = std::move(store);
  state_->options = std::move(options);
}

Reaper::~Reaper() { stop(); }

ReapCycle Reaper::run_once() { return state_->cycle(); }

void Reaper::start() {
  std::lock_guard lock(state_->mutex);
  if (state_->thread.joinable()) return;
  state_->stopping = false;
  state_->thread = std::jthread([state = state_](std::stop_token stop) { state->run(std::move(stop)); });
}

void Reaper::stop() {
  state_->stopping = true;
  std::jthread thread;
  {
    std::lock_guard lock(state_->mutex);
    thread = std::move(state_->thread);
  }
  if (thread.joinable()) {
    thread.request_stop();
    thread.join();
  }
}

ReaperStats Reaper::stats() const {
  return ReaperStats{state_->rows.load(), state_->cycles.load(), state_->failures.load(),
                     state_->consecutive_failures.load()};
}

}  // namespace dblock

#pragma once
// How `dblock bench` measures: latencies per operation, threads run for a duration, and the fair
// comparison of dblock with its floor on a shared, noisy machine. What a scenario reports.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace dblock::cli {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Latencies {
  std::vector<double> ms;  // one entry per operation

  void add(Clock::duration d) { ms.push_back(std::chrono::duration<double, std::milli>(d).count()); }
  void merge(const Latencies& other) { ms.insert(ms.end(), other.ms.begin(), other.ms.end()); }
  [[nodiscard]] double percentile(double p) {
    if (ms.empty()) return 0;
    std::sort(ms.begin(), ms.end());
    return ms[std::min(ms.size() - 1, static_cast<std::size_t>(p * static_cast<double>(ms.size())))];
  }
};

struct Figure {
  double ops_per_sec = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

struct Result {
  std::string scenario;
  std::string mode;
  std::size_t threads = 0;
  Figure dblock;
  std::optional<Figure> floor;
  std::string floor_name;
  std::optional<double> ratio;               // dblock against the floor; see compare()
  std::map<std::string, std::string> extra;  // scenario-specific numbers, already formatted
};

inline Figure figure_of(Latencies& latencies, std::size_t ops, Clock::duration elapsed) {
  double seconds = std::chrono::duration<double>(elapsed).count();
  return {seconds > 0 ? static_cast<double>(ops) / seconds : 0, latencies.percentile(0.50), latencies.percentile(0.99)};
}

/// Threads kept for a whole comparison, so both sides run on the same long-lived threads, as an
/// application's workers do: a library that keeps per-thread state (an owner, a pinned session)
/// builds it once, not once per slice.
class Workers {
 public:
  explicit Workers(std::size_t count) {
    for (std::size_t t = 0; t < count; ++t) threads_.emplace_back([this, t](std::stop_token stop) { serve(stop, t); });
  }
  ~Workers() = default;  // each jthread is asked to stop (its wait wakes on that) and joined
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  /// Runs `body(thread_index, latencies)` on every worker until `duration` passes.
  template <class Body>
  Figure run(milliseconds duration, Body& body) {
    std::vector<Latencies> per_thread(threads_.size());
    auto started = Clock::now();
    {
      std::lock_guard lock(mutex_);
      task_ = [&body, &per_thread](std::size_t t) { body(t, per_thread[t]); };
      stop_slice_ = false;
      ops_ = 0;
      done_ = 0;
      ++generation_;
    }
    changed_.notify_all();
    std::this_thread::sleep_for(duration);  // the slice's length, not a synchronisation
    stop_slice_ = true;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return done_ == threads_.size(); });
      task_ = nullptr;
    }
    auto elapsed = Clock::now() - started;
    Latencies all;
    for (auto& latencies : per_thread) all.merge(latencies);
    return figure_of(all, ops_, elapsed);
  }

 private:
  void serve(std::stop_token stop, std::size_t index) {
    std::size_t seen = 0;
    while (true) {
      std::function<void(std::size_t)> task;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, stop, [&] { return generation_ != seen; });
        if (stop.stop_requested()) return;
        seen = generation_;
        task = task_;
      }
      std::size_t mine = 0;
      while (!stop_slice_) {
        task(index);
        ++mine;
      }
      {
        std::lock_guard lock(mutex_);
        ops_ += mine;
        ++done_;
      }
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::function<void(std::size_t)> task_;  // guarded by mutex_
  std::size_t generation_ = 0;             // guarded by mutex_
  std::size_t done_ = 0;                   // guarded by mutex_
  std::size_t ops_ = 0;                    // guarded by mutex_
  std::atomic<bool> stop_slice_{false};
  std::vector<std::jthread> threads_;  // last: they stop before the rest goes
};

/// Runs `body(thread_index, latencies)` on `threads` threads until `duration` passes.
template <class Body>
Figure run_threads(std::size_t threads, milliseconds duration, Body body) {
  Workers workers(threads);
  return workers.run(duration, body);
}

struct Comparison {
  Figure floor;
  Figure library;
  double ratio = 0;  // median over the pairs of library ops/s ÷ floor ops/s
};

/// Floor and dblock, compared fairly on a shared, noisy machine: each first runs once unmeasured
/// (connections opened, statements prepared), then they alternate in short pairs (ABBA order, so a
/// drift hits both alike), and the ratio is the median of the pairs' ratios (a burst of load from
/// elsewhere spoils one pair, not the figure). Each side runs on its own workers; one call of the
/// floor's body counts as `floor_ops_per_call` operations (a batch of names in one round trip).
template <class Floor, class Library>
Comparison compare_on(Workers& floor_workers, Floor& floor, double floor_ops_per_call, Workers& library_workers,
                      Library& library, milliseconds duration) {
  constexpr std::size_t kPairs = 8;
  auto slice = std::max(milliseconds(50), duration / static_cast<int>(2 * kPairs));
  auto run_floor = [&] {
    auto figure = floor_workers.run(slice, floor);
    figure.ops_per_sec *= floor_ops_per_call;
    return figure;
  };
  run_floor();
  library_workers.run(slice, library);
  std::vector<Figure> floors, libraries;
  std::vector<double> ratios;
  for (std::size_t pair = 0; pair < kPairs; ++pair) {
    bool floor_first = pair % 2 == 0;
    Figure first = floor_first ? run_floor() : library_workers.run(slice, library);
    Figure second = floor_first ? library_workers.run(slice, library) : run_floor();
    floors.push_back(floor_first ? first : second);
    libraries.push_back(floor_first ? second : first);
    ratios.push_back(libraries.back().ops_per_sec / std::max(1e-9, floors.back().ops_per_sec));
  }
  auto mean = [](const std::vector<Figure>& figures) {
    Figure sum;
    for (auto& f : figures) {
      sum.ops_per_sec += f.ops_per_sec / static_cast<double>(figures.size());
      sum.p50_ms += f.p50_ms / static_cast<double>(figures.size());
      sum.p99_ms += f.p99_ms / static_cast<double>(figures.size());
    }
    return sum;
  };
  std::sort(ratios.begin(), ratios.end());
  return {mean(floors), mean(libraries), (ratios[kPairs / 2 - 1] + ratios[kPairs / 2]) / 2};
}

/// compare_on with both sides on the same `threads` workers, one operation per call.
template <class Floor, class Library>
Comparison compare(std::size_t threads, milliseconds duration, Floor floor, Library library) {
  Workers workers(threads);
  return compare_on(workers, floor, 1.0, workers, library, duration);
}

}  // namespace dblock::cli

#pragma once
/// Reaper: deletes rows whose lease has ended, in bounded batches, as a thread inside an
/// application or driven by the `dblock reaper` sidecar. Correctness never depends on it (an
/// expired row is taken over by the next acquirer anyway); it keeps the table small. Several
/// reapers at once are safe and do not block each other or acquirers, and a row an acquirer has
/// just taken over or renewed is never deleted: expiry is re-checked by the database's clock at
/// the moment of deletion. Thread-safe.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <dblock/store.hpp>

#include <dblock/export.hpp>

namespace dblock {

/// What one cycle did: batches until a batch came back smaller than the batch size.
struct ReapCycle {
  std::uint64_t rows = 0;
  std::uint64_t batches = 0;
  std::chrono::microseconds duration{0};
  bool ok = true;
  std::string error;  ///< set when !ok
};

struct ReaperOptions {
  /// Pause between cycles. Default: 10 s.
  std::chrono::milliseconds interval{10'000};
  /// Most rows one statement deletes. Default: 1000.
  std::size_t batch_size = 1000;
  /// Each pause is drawn uniformly from interval × [1 - jitter, 1 + jitter]. Default: 0.2.
  double jitter = 0.2;
  /// After a failed cycle the pause is the retry delay, doubling up to `interval`. Default: 500 ms.
  std::chrono::milliseconds retry_delay{500};
  /// Called after every cycle from the reaper's thread (metrics, health). Must not throw.
  std::function<void(const ReapCycle&)> on_cycle;
};

/// Monotonic counters since construction.
struct ReaperStats {
  std::uint64_t rows = 0;
  std::uint64_t cycles = 0;
  std::uint64_t failures = 0;
  std::uint64_t consecutive_failures = 0;
};

class DBLOCK_EXPORT Reaper {
 public:
  /// @throws InvalidArgument for bad options.
  explicit Reaper(std::shared_ptr<Store> store, ReaperOptions options = {});
  /// Stops the thread if it runs.
  ~Reaper();
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  /// One cycle on the calling thread. Never throws for database errors: they are in the result.
  ReapCycle run_once();
  /// Runs cycles on a background thread until stop(). Idempotent.
  void start();
  /// Asks the thread to stop and waits for it; a cycle in progress ends after its current batch.
  void stop();
  [[nodiscard]] ReaperStats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace dblock

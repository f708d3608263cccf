#pragma once
// What `dblock bench` needs below the public API, and nothing more: the backend's bare-driver
// floor for each scenario, rows whose lease has ended (the reap scenario), and one renewal
// statement over given locks (the watchdog's cycle, measured without the watchdog). The CLI's one
// internal header.

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include <dblock/export.hpp>
#include <dblock/store.hpp>

#include "backends/bench_backend.hpp"
#include "backends/lock_backend.hpp"

namespace dblock::detail {

class DBLOCK_EXPORT BenchFloor {  // exported for the CLI, which links libdblock.so in a shared build
 public:
  explicit BenchFloor(Store& store);

  /// A client running the backend's own lock statements on a dedicated session, prepared once.
  [[nodiscard]] std::unique_ptr<RawLockClient> raw_client();
  /// A client running hand-written SQL instead (BenchBackend::hand_written_client), or null.
  [[nodiscard]] std::unique_ptr<RawLockClient> hand_written_client(HandWritten how);
  /// A bare-driver write transaction, fenced or not (BenchBackend::raw_write_client), or null.
  [[nodiscard]] std::unique_ptr<RawWriteClient> raw_write_client();
  /// The server's ceiling for the combined statements (BenchBackend::ceiling_client), or null.
  [[nodiscard]] std::unique_ptr<RawBatchClient> ceiling_client();
  /// Inserts `count` rows named `<stem><i>` whose lease has already ended.
  void seed_expired(std::string_view stem, std::size_t count);
  /// One renewal statement over `held`; returns how many were renewed.
  std::size_t renew(std::span<const HeldRef> held);

 private:
  BenchBackend& bench_;
  LockBackend& locks_;
};

}  // namespace dblock::detail

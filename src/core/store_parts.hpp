#pragma once
// The parts of a Store that the layers above the backends use, each by name: the backend (whose
// roles each client takes as it needs), the resolved URI, the logger, the release hub waiters
// share, and "the schema changed" for the migrator. Store::Impl itself stays private to store.cpp.

#include <chrono>
#include <functional>
#include <memory>
#include <string_view>

#include <spdlog/fwd.h>
#include <dblock/store.hpp>

#include "backends/backend.hpp"
#include "backends/backend_seams.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

class ManualClock;
class ReleaseHub;

/// What dblock::testing opens a store with (all null in production): the database's clock, a hook
/// before each statement, the managers' local clock, and a tap that sees every manager's events.
struct TestSeams {
  std::shared_ptr<const DatabaseClock> database_clock;
  std::shared_ptr<StatementHook> hook;
  std::shared_ptr<ManualClock> local_clock;
  std::function<void(const LockEvent&)> event_tap;
};

struct DBLOCK_EXPORT StoreParts {
  static Backend& backend(Store& store);
  static const StoreUri& uri(const Store& store);
  static const std::shared_ptr<spdlog::logger>& logger(const Store& store);
  static std::chrono::milliseconds connect_timeout(const Store& store);
  /// Created by the first waiter; shared by every manager of the store.
  static ReleaseHub& release_hub(Store& store);
  /// After a migration: the next Store::check_schema() reads the version again.
  static void schema_changed(Store& store);
  /// A store over a backend built by hand (unit tests of the core over a scripted backend).
  static std::shared_ptr<Store> over(std::unique_ptr<Backend> backend, std::shared_ptr<spdlog::logger> logger);
  /// Store::open with dblock::testing's seams (SQLite only: InvalidArgument otherwise).
  static std::shared_ptr<Store> open_for_testing(std::string_view uri, StoreOptions options, TestSeams seams);
  /// The managers' local clock: null unless opened for testing.
  static const std::shared_ptr<ManualClock>& local_clock(const Store& store);
  /// Sees every event of every manager of the store, before ManagerOptions::on_event: null unless
  /// opened for testing. Called on the thread that caused the event; must not throw.
  static const std::function<void(const LockEvent&)>& event_tap(const Store& store);
};

}  // namespace dblock::detail

#pragma once
// The parts of a Store that the layers above the backends use, each by name: the backend (whose
// roles each client takes as it needs), the resolved URI, the logger, the release hub waiters
// share, and "the schema changed" for the migrator. Store::Impl itself stays private to store.cpp.

#include <chrono>
#include <memory>

#include <dblock/store.hpp>
#include <spdlog/fwd.h>

#include "backends/backend.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

class ReleaseHub;

struct StoreParts {
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
};

}  // namespace dblock::detail

#pragma once
// Its own header so that the drivers, which the factory includes, need not include the factory.

#include <chrono>
#include <memory>

#include <spdlog/fwd.h>

#include "backends/backend_seams.hpp"

namespace dblock::detail {

/// What every backend is opened with.
struct BackendSettings {
  std::chrono::milliseconds connect_timeout;
  std::chrono::milliseconds statement_timeout;
  std::shared_ptr<spdlog::logger> logger;
  /// dblock::testing only (backend_seams.hpp): null in production.
  std::shared_ptr<const DatabaseClock> clock = nullptr;
  std::shared_ptr<StatementHook> hook = nullptr;
};

}  // namespace dblock::detail

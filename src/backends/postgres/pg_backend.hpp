#pragma once
#include <chrono>
#include <memory>

#include <spdlog/fwd.h>

#include "backends/backend.hpp"
#include "core/uri.hpp"

namespace dblock::detail {

/// PostgreSQL table mode on libpq. @throws ConnectionError when the first session fails.
[[nodiscard]] std::unique_ptr<Backend> make_postgres_backend(const StoreUri& uri,
                                                             std::chrono::milliseconds connect_timeout,
                                                             std::shared_ptr<spdlog::logger> logger);

}  // namespace dblock::detail

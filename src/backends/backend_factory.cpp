#include "backends/backend_factory.hpp"

#include <fmt/format.h>

#include "backends/postgres/pg_backend.hpp"
#include "backends/sqlite/sqlite_backend.hpp"

namespace dblock::detail {

std::unique_ptr<Backend> make_backend(const StoreUri& uri, std::chrono::milliseconds connect_timeout,
                                      std::shared_ptr<spdlog::logger> logger) {
  if (uri.scheme == "postgresql") return make_postgres_backend(uri, connect_timeout, std::move(logger));
  if (uri.scheme == "sqlite") return make_sqlite_backend(uri, connect_timeout, std::move(logger));
  throw InvalidArgument(fmt::format("DSN '{}': the {} backend is not part of this dblock build yet", uri.redacted,
                                    uri.scheme));
}

}  // namespace dblock::detail

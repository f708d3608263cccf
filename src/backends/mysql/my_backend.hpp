#pragma once
#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "backends/backend_settings.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

/// MySQL/MariaDB on Connector/C++: table mode and GET_LOCK mode.
/// @throws ConnectionError when the first session fails.
[[nodiscard]] std::unique_ptr<Backend> make_mysql_backend(const StoreUri& uri, const BackendSettings& settings);

/// "MySQL Connector/C++ 1.1.12": the driver this process was built with.
[[nodiscard]] std::string mysql_driver_version();

/// The database the URI names (dblock's objects live there). @throws InvalidArgument.
[[nodiscard]] std::string mysql_database_of(const StoreUri& uri);

}  // namespace dblock::detail

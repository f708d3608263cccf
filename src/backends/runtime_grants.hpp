#pragma once
// The grants a runtime role needs on dblock's objects, as GRANT statements a DBA runs: what
// `dblock migrate grants` prints. Pure text from the objects the migrations create; no connection.

#include <span>
#include <string>
#include <string_view>

#include "backends/catalog_object.hpp"

namespace dblock::detail {

/// PostgreSQL: USAGE on the schema; SELECT, INSERT, UPDATE, DELETE on the lock table; SELECT on
/// the history; USAGE on the token sequence (nextval); EXECUTE on each function. `role` is
/// quoted as an identifier. @throws InvalidArgument for an empty, over-long or unprintable role.
[[nodiscard]] std::string postgres_runtime_grants(std::string_view schema, std::string_view prefix,
                                                  std::span<const CatalogObject> objects, std::string_view role);

/// MySQL/MariaDB, for `user` or `user@host` (host `%` when not given): the same table rights,
/// SELECT and INSERT on the token sequence (NEXTVAL, GET_LOCK mode) and EXECUTE on each function (they run
/// with their definer's rights). @throws InvalidArgument for a bad account or one holding a quote.
[[nodiscard]] std::string mysql_runtime_grants(std::string_view database, std::string_view prefix,
                                               std::span<const CatalogObject> objects, std::string_view role);

}  // namespace dblock::detail

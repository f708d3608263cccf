#pragma once
// The one migration engine: how a migration is applied and recorded on any dialect, and the
// script `dblock migrate sql` prints. A dialect supplies only SQL text (MigrationDialect) and the
// steps of its session (MigrationSession).

#include <span>
#include <string>
#include <string_view>

#include "backends/migration_backend.hpp"

namespace dblock::detail {

/// Runs `migration` on `session` and records it. Where the dialect's DDL is transactional, all of
/// it or nothing; where DDL commits by itself, recorded as started first, so that a run broken
/// off part-way is seen and completed by the next `up`.
/// @throws DatabaseError (PermissionDenied for missing rights) naming the migration and what was
///         left behind.
void apply_migration(MigrationSession& session, const MigrationDialect& dialect, const MigrationFile& migration,
                     std::string_view applied_by);

/// The SQL `up` runs for `migrations` on an empty database, history records included, as a script
/// for the dialect's own command-line client.
[[nodiscard]] std::string render_migration_script(const MigrationDialect& dialect,
                                                  std::span<const MigrationFile> migrations);

}  // namespace dblock::detail

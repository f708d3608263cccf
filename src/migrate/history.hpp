#pragma once
// The migration history read against what this build ships: each version's state, and which
// states stop `up` and `verify`.

#include <string>
#include <vector>

#include <dblock/migrate.hpp>

#include "backends/migration_backend.hpp"

namespace dblock::detail {

/// Every shipped and every recorded version with its state, ordered by version.
[[nodiscard]] std::vector<MigrationStatus> compare(const std::vector<MigrationFile>& files,
                                                   const std::vector<AppliedMigration>& history);
/// A failed record `up` completes by itself: the dialect's DDL is not transactional, every statement
/// of its migrations is safe to run again, and the record is of the file this build ships.
[[nodiscard]] bool resumable(const MigrationStatus& status, bool dialect_resumes);
/// Throws SchemaError for any state that must stop `up` (and fail `verify`), naming what to do; a
/// failed record `up` can complete passes when `dialect_resumes`.
void refuse_problems(const std::vector<MigrationStatus>& statuses, const std::string& where,
                     bool dialect_resumes = false);
[[nodiscard]] const MigrationFile& status_file(const std::vector<MigrationFile>& files, int version);
[[nodiscard]] const MigrationStatus& status_of(const std::vector<MigrationStatus>& statuses, int version);

}  // namespace dblock::detail

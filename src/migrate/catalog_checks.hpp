#pragma once
// What the live catalog must and must not hold around a migration run: no foreign object under one
// of dblock's names before `up` creates anything, the rights the run needs, and — for `verify` —
// every difference between what the applied migrations create and what is there.

#include <functional>
#include <string>
#include <vector>

#include <dblock/migrate.hpp>

#include "backends/migration_backend.hpp"

namespace dblock::detail {

/// What the history table and the migrations in `files` whose version `counts` leave in the catalog.
[[nodiscard]] std::vector<CatalogObject> objects_of(const MigrationDialect& dialect,
                                                    const std::vector<MigrationFile>& files,
                                                    const std::function<bool(int version)>& counts);

/// dblock never adopts what it did not create: before `up` creates anything, refuses (SchemaError)
/// when an object under one of the names it would create already exists (a history table of
/// another shape included), naming each. Objects of migrations recorded as applied, or as started
/// (MySQL, to be completed), are dblock's.
void refuse_foreign_objects(MigrationBackend& backend, const std::vector<MigrationFile>& files,
                            const std::vector<MigrationStatus>& statuses, bool dialect_resumes,
                            const std::string& where);

/// Refuses (PermissionDenied), before anything is created, a run the role lacks the rights for,
/// naming each right: without this a role that may create tables but not functions (say) would
/// leave half a migration behind on MySQL, whose DDL is not transactional.
void refuse_missing_rights(MigrationBackend& backend, const std::vector<MigrationFile>& files,
                           const std::vector<MigrationStatus>& statuses, bool dialect_resumes,
                           const std::string& where);

/// Every difference between `expected` and the live catalog. `bodies_hidden`: set when the catalog
/// would not show this role a body to compare (MySQL shows a routine's body only to its definer
/// and to roles that may alter it).
[[nodiscard]] std::vector<std::string> catalog_differences(MigrationBackend& backend,
                                                           const std::vector<CatalogObject>& expected,
                                                           bool& bodies_hidden);

}  // namespace dblock::detail

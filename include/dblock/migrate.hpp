#pragma once
/// dblock's own schema migrations, embedded in the library. They create dblock's tables (and
/// nothing else) in the store's schema with its table prefix, and record each applied version in
/// a history table with its checksum. Safe to run from many replicas at once: a database-level
/// lock serialises them and the history is re-read after taking it.

#include <chrono>
#include <string>
#include <vector>

#include <dblock/store.hpp>

namespace dblock {

struct MigrationResult {
  std::vector<int> applied;   ///< versions this call applied, in order
  int current_version = 0;    ///< schema version after the call
};

/// Applies every missing version. Idempotent.
/// @throws SchemaError when the database has a version this build does not know, or an applied
///         migration's checksum differs from the shipped file; Timeout when the migration lock
///         was not obtained within lock_timeout; ConnectionError/DatabaseError.
MigrationResult migrate(Store& store, std::chrono::milliseconds lock_timeout = std::chrono::minutes(2));

/// The schema version this build understands (the newest embedded migration).
[[nodiscard]] int latest_schema_version() noexcept;

}  // namespace dblock

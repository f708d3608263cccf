#pragma once
/// dblock's own schema migrations, embedded in the library. They create dblock's tables (and
/// nothing else) in the store's schema with its table prefix, and record each applied version in
/// a history table with its checksum. Safe to run from many replicas at once: a database-level
/// lock (polled with a deadline) serialises them and the history is re-read after taking it.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include <dblock/export.hpp>

namespace dblock {

struct MigrationResult {
  std::vector<int> applied;  ///< versions this call applied, in order
  int current_version = 0;   ///< schema version after the call
};

enum class MigrationState {
  applied,        ///< recorded as applied with the shipped checksum
  pending,        ///< shipped, not applied yet
  drifted,        ///< applied, but the recorded checksum differs from the shipped file
  failed,         ///< recorded as failed (MySQL: started, maybe broken off): `up` or `repair` completes it
  unknown_newer,  ///< recorded by a newer dblock: this build must not touch the database
};

[[nodiscard]] DBLOCK_EXPORT std::string_view to_string(MigrationState state) noexcept;

struct MigrationStatus {
  int version = 0;
  std::string name;
  MigrationState state = MigrationState::pending;
  std::string shipped_checksum;   ///< empty for unknown_newer
  std::string recorded_checksum;  ///< empty for pending
};

/// Library calls behind `dblock migrate ...`. Thread-safe as the Store is.
class DBLOCK_EXPORT Migrator {
 public:
  explicit Migrator(std::shared_ptr<Store> store, std::chrono::milliseconds lock_timeout = std::chrono::minutes(2));

  /// Every shipped and every recorded version with its state. Read-only, takes no lock.
  [[nodiscard]] std::vector<MigrationStatus> status();
  /// Checks the history (drift, failed, newer) and then the live catalog: every table with its
  /// columns, index, sequence, function body and trigger the applied migrations create.
  /// @throws SchemaError naming every difference.
  void verify();
  /// Applies missing versions up to `to` (default: all), in order, each in a transaction where the
  /// dialect allows; on MySQL also completes a version recorded as failed (broken off part-way).
  /// Idempotent. Refuses, before creating anything, when an object it would create already exists
  /// and is not dblock's, or when the role lacks a right the run needs (CREATE on the schema or
  /// database, ownership of what it re-defines, ...). @throws SchemaError (drift, newer, foreign
  /// objects), PermissionDenied (naming every missing right), Timeout (lock).
  MigrationResult up(std::optional<int> to = std::nullopt);
  /// Resolves failed records: on MySQL completes the migration (its statements are safe to run
  /// again); elsewhere, where a failed migration left nothing behind, clears the record so that
  /// `up` runs it again. Returns the versions repaired.
  std::vector<int> repair();

  /// Exactly what `up` would run on an empty database for versions [from, to], placeholders
  /// filled, including the history records, so a database migrated by hand is recognised later.
  /// Needs no connection: only the URI (dialect, schema, prefix) is used.
  [[nodiscard]] static std::string sql(std::string_view uri, std::optional<int> from = std::nullopt,
                                       std::optional<int> to = std::nullopt, StoreOptions options = {});
  /// The GRANT statements that give `role` exactly the rights a runtime role needs on the objects
  /// of every migration this build ships (locks, waiting, renewing, listing, force-release, reaping,
  /// and `up`/`status`/`verify` on an up-to-date schema), no CREATE anywhere. MySQL: `user` or
  /// `user@host` (host `%` by default). SQLite: a comment (it has no roles). Needs no connection.
  /// @throws InvalidArgument for a bad URI or role.
  [[nodiscard]] static std::string grants(std::string_view uri, std::string_view role, StoreOptions options = {});

 private:
  std::shared_ptr<Store> store_;
  std::chrono::milliseconds lock_timeout_;
};

/// Applies every missing version: `Migrator(store).up()`.
DBLOCK_EXPORT MigrationResult migrate(Store& store, std::chrono::milliseconds lock_timeout = std::chrono::minutes(2));

/// The schema version this build understands (the newest embedded migration).
[[nodiscard]] DBLOCK_EXPORT int latest_schema_version() noexcept;

}  // namespace dblock

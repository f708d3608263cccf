#include "migrate/migration_engine.hpp"

#include <chrono>

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::detail {

namespace {

std::chrono::milliseconds since(std::chrono::steady_clock::time_point started) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
}

/// The migration's error with what it left behind; a missing right stays PermissionDenied.
[[noreturn]] void rethrow_failed(const Error& error, const std::string& what_happened) {
  if (dynamic_cast<const PermissionDenied*>(&error) != nullptr) throw PermissionDenied(what_happened + error.what());
  throw DatabaseError(what_happened + error.what(), error.sqlstate());
}

void run_resumable(MigrationSession& session, const MigrationDialect& dialect, const MigrationFile& migration,
                   std::string_view applied_by) {
  auto started = std::chrono::steady_clock::now();
  session.record_started(migration, applied_by);
  try {
    for (auto& statement : dialect.statements(migration.sql)) session.execute(statement);
  } catch (const Error& e) {
    rethrow_failed(e, fmt::format("migration {:04d}_{} failed part-way and is recorded as failed (DDL commits by "
                                  "itself on {}, so it cannot be rolled back; its statements are safe to run again). "
                                  "Fix the cause, then run `dblock migrate up` again: it completes the migration. "
                                  "The error: ",
                                  migration.version, migration.name, to_string(dialect.dialect())));
  }
  session.record_applied(migration, applied_by, since(started));
}

}  // namespace

void apply_migration(MigrationSession& session, const MigrationDialect& dialect, const MigrationFile& migration,
                     std::string_view applied_by) {
  if (dialect.ddl_commits_itself()) return run_resumable(session, dialect, migration, applied_by);
  auto started = std::chrono::steady_clock::now();
  session.begin_migration();
  try {
    for (auto& statement : dialect.statements(migration.sql)) session.execute(statement);
    session.record_applied(migration, applied_by, since(started));
    session.commit_migration();
  } catch (const Error& e) {
    try {
      session.undo_migration();
    } catch (const std::exception&) {
      // The session ends next, which rolls back as well.
    }
    rethrow_failed(
        e, fmt::format("migration {:04d}_{} failed and was rolled back, nothing of it{} applied: ", migration.version,
                       migration.name, session.one_transaction() ? " nor of this run" : ""));
  }
}

std::string render_migration_script(const MigrationDialect& dialect, std::span<const MigrationFile> migrations) {
  auto frame = dialect.script_frame();
  std::string script = frame.header +
                       "-- The history records make `dblock migrate status` recognise what was applied by hand.\n" +
                       frame.opening;
  auto add = [&](const std::string& statement) { script += statement + frame.terminator + "\n"; };
  for (auto& statement : frame.preamble) add(statement);
  for (auto& migration : migrations) {
    script += fmt::format("\n-- {:04d}_{}\n", migration.version, migration.name);
    if (frame.transaction_per_migration) add("BEGIN");
    for (auto& statement : dialect.statements(migration.sql)) add(statement);
    add(dialect.script_record(migration));
    if (frame.transaction_per_migration) add("COMMIT");
  }
  if (!frame.epilogue.empty()) script += "\n";
  for (auto& statement : frame.epilogue) add(statement);
  return script + frame.closing;
}

}  // namespace dblock::detail

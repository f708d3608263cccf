#pragma once
// Direct database access for tests, through the dialect's own client library: it simulates what
// the library must survive (a lease running out, a row stolen) by editing rows behind its back.

#include <memory>
#include <string>
#include <vector>

namespace dblock::test {

class Admin {
 public:
  virtual ~Admin() = default;
  /// Moves the lease of `name` into the past, as if its holder had stalled.
  virtual void expire(const std::string& name) = 0;
  /// Hands the row to another owner with a new token, as a takeover by someone else would.
  virtual void steal(const std::string& name, const std::string& owner) = 0;
  /// Inserts `count` rows named `<stem><i>` whose lease ended a second ago (abandoned locks), with
  /// the statement `dblock bench` seeds them with (BenchBackend::seed_expired).
  void insert_expired(const std::string& stem, int count);
  /// Runs arbitrary SQL (dialect-specific tests only).
  virtual void exec(const std::string& sql) = 0;
  /// Runs a query and returns the first column of every row as text.
  virtual std::vector<std::string> query(const std::string& sql) = 0;
  /// The migration history table, quoted and qualified as SQL needs it.
  [[nodiscard]] virtual std::string history_table() const = 0;
  /// Whether a table of that exact name exists (in the admin's schema).
  virtual bool table_exists(const std::string& name) = 0;
  /// Advisory mode: whether the server holds the advisory lock (GET_LOCK lock) of a lock name.
  virtual bool advisory_held(const std::string& name) = 0;
  /// Advisory mode: ends the server session holding `name`, as a crash or a cut network would,
  /// and returns once the server has released the lock. Returns how many sessions it ended.
  virtual int kill_advisory_holder(const std::string& name) = 0;

 private:
  friend std::unique_ptr<Admin> make_admin(const std::string&, const std::string&, const std::string&,
                                           const std::string&, bool);
  std::string store_dsn_;  // dblock's DSN for the admin's tables
};

/// `dsn` is the server DSN without dblock's query parameters. `client_found_rows`: MySQL only,
/// connect with CLIENT_FOUND_ROWS (affected rows count matched rows, as Connector/J's default).
std::unique_ptr<Admin> make_admin(const std::string& dialect, const std::string& dsn, const std::string& schema,
                                  const std::string& prefix, bool client_found_rows = false);

/// The dialects' own admins, built with their drivers (make_admin picks one).
std::unique_ptr<Admin> make_postgres_admin(const std::string& dsn, const std::string& schema,
                                           const std::string& prefix);
std::unique_ptr<Admin> make_mysql_admin(const std::string& dsn, const std::string& prefix, bool client_found_rows);
std::unique_ptr<Admin> make_sqlite_admin(const std::string& path, const std::string& prefix);

}  // namespace dblock::test

#pragma once
// What every MySQL/MariaDB role of one store shares: the server, its settings, the statement sets
// (all numbered by one registry, so one session runs them all) and the session pool. It carries no
// role itself: my_locks, my_groups, my_advisory, my_migration, my_bench, my_fence and
// my_occurrences hold one each, and my_backend hands them out.

#include <memory>
#include <span>
#include <string>

#include "backends/backend_settings.hpp"
#include "backends/lock_backend.hpp"
#include "backends/mysql/my_advisory.hpp"
#include "backends/mysql/my_connection.hpp"
#include "backends/mysql/my_sql.hpp"
#include "backends/session_pool.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

struct MyDatabase {
  /// Opens the first session, which proves the server and the credentials now, not at first use,
  /// and tells the engine. @throws ConnectionError when it fails; InvalidArgument when the URI says
  /// engine=galera and the server is not a Galera node.
  MyDatabase(const StoreUri& uri, const BackendSettings& settings);
  MyDatabase(const MyDatabase&) = delete;
  MyDatabase& operator=(const MyDatabase&) = delete;

  /// A dedicated session, outside the pool (migrations, the bench floor).
  [[nodiscard]] std::unique_ptr<MyConnection> connect() const;

  /// One call of a group function (or, on Galera, of a combined one). On Galera it runs in a
  /// transaction of the client's own: a replicated write that aborts it (brute force) then reaches
  /// us as error 1213, a TransientError core retries. An aborted autocommit call of these functions
  /// could leave the client without any reply until the statement timeout (doc/clusters.md).
  MyRows group_call(const MyStatement& statement, std::span<const MyParam> params);

  MyEndpoint endpoint;
  std::string redacted;
  BackendSettings settings;
  StatementIds ids;  // before every statement set (the engine check's first): all of them share its ids
  bool galera;
  std::string migration_lock_name;
  std::string prefix;
  MySql sql;
  MyNamedLockSql named_lock_sql;
  SessionPool<MyConnection> pool;  // whatever uses its sessions is declared after it (destroyed first)

 private:
  MyDatabase(const StoreUri& uri, const BackendSettings& settings, const MyEndpoint& endpoint);
  MyDatabase(const StoreUri& uri, const BackendSettings& settings, const MyEndpoint& endpoint,
             std::unique_ptr<MyConnection> first);
};

/// renew's and renew_members' parameter: [[name, owner, token, ttl_us], ...], or with `kinds`
/// [[name, owner, kind, token, ttl_us], ...].
[[nodiscard]] std::string held_json(std::span<const HeldRef> held, bool kinds = false);

}  // namespace dblock::detail

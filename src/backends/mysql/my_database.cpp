#include "backends/mysql/my_database.hpp"

#include <fmt/format.h>

#include "backends/mysql/my_migration.hpp"
#include "base/holder_kind.hpp"
#include "base/json.hpp"

namespace dblock::detail {

namespace {

/// Whether the server is a node of a Galera cluster (wsrep_on; MySQL 8 has no such variable).
/// @throws InvalidArgument when the URI says engine=galera and it is not.
bool is_galera_node(MyConnection& connection, const StoreUri& uri, StatementIds& ids) {
  MyStatement engine{ids, "engine check", "SHOW VARIABLES LIKE 'wsrep_on'"};
  auto rows = connection.query(engine, {});
  bool galera = !rows.empty() && rows.front().str(1) == "ON";
  if (uri.galera && !galera)
    throw InvalidArgument(
        fmt::format("DSN '{}' says engine=galera, but the server is not a Galera node (wsrep_on is "
                    "OFF)",
                    uri.redacted));
  return galera;
}

/// A Galera node applies other nodes' commits a little after they return, so a plain read there
/// can miss a migration or a grant just made elsewhere. Reads (function calls included) first
/// wait until the node has applied everything committed before they started. Writes need no
/// wait: certification refuses one based on a stale read.
void read_causally(MyConnection& connection) { connection.execute("SET SESSION wsrep_sync_wait = 1"); }

}  // namespace

MyDatabase::MyDatabase(const StoreUri& uri, const BackendSettings& settings)
    : MyDatabase(uri, settings, parse_mysql_uri(uri.driver_uri, uri.redacted)) {}

MyDatabase::MyDatabase(const StoreUri& uri, const BackendSettings& settings, const MyEndpoint& endpoint)
    : MyDatabase(uri, settings, endpoint,
                 std::make_unique<MyConnection>(endpoint, uri.redacted, settings.connect_timeout,
                                                settings.statement_timeout)) {}

MyDatabase::MyDatabase(const StoreUri& uri, const BackendSettings& settings, const MyEndpoint& endpoint,
                       std::unique_ptr<MyConnection> first)
    : endpoint(endpoint),
      redacted(uri.redacted),
      settings(settings),
      galera(is_galera_node(*first, uri, ids)),
      migration_lock_name(dblock::detail::migration_lock_name(uri, endpoint.database)),
      prefix(uri.prefix),
      sql(ids, uri.prefix, galera),
      named_lock_sql(ids, endpoint.database, uri.prefix),
      pool([this] { return connect(); }, uri.redacted, uri.pool_size, settings.connect_timeout) {
  if (galera) read_causally(*first);
  pool.adopt(std::move(first));
}

std::unique_ptr<MyConnection> MyDatabase::connect() const {
  auto connection =
      std::make_unique<MyConnection>(endpoint, redacted, settings.connect_timeout, settings.statement_timeout);
  if (galera) read_causally(*connection);
  return connection;
}

MyRows MyDatabase::group_call(const MyStatement& statement, std::span<const MyParam> params) {
  auto session = pool.lease();
  if (!galera) return session->query(statement, params);
  session->execute("START TRANSACTION");
  try {
    auto rows = session->query(statement, params);
    session->execute("COMMIT");
    return rows;
  } catch (...) {
    if (session->usable()) {
      try {
        session->execute("ROLLBACK");  // after 1213 the server has rolled back already; anything else
      } catch (...) {
        session->abandon();
      }
    }
    throw;
  }
}

std::string held_json(std::span<const HeldRef> held, bool kinds) {
  std::string json = "[";
  for (std::size_t i = 0; i < held.size(); ++i)
    json +=
        fmt::format("{}[{},{},{}{},{}]", i == 0 ? "" : ",", json_string(held[i].name), json_string(held[i].owner),
                    kinds ? fmt::format("\"{}\",", kind_text(held[i].kind)) : "", held[i].token, micros(held[i].ttl));
  return json + "]";
}

}  // namespace dblock::detail

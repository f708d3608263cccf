#pragma once
// How database tests find their servers: a DSN per backend from the environment (printed by
// tools/testdb.sh). Without one a test skips, unless DBLOCK_REQUIRE_SERVERS=1 (tools/test.sh sets
// it), which turns the missing server into a failure.

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <dblock/options.hpp>

#include <cstdint>
#include <stdexcept>

namespace dblock::test {

inline bool servers_required() {
  const char* value = std::getenv("DBLOCK_REQUIRE_SERVERS");
  return value != nullptr && std::string(value) == "1";
}

inline std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

/// Whether this build holds the backend of `dialect` (CMake's DBLOCK_WITH_POSTGRES/_MYSQL; SQLite
/// always). Suites list only the cases of built backends (`built`); a single-dialect test of a
/// backend left out of the build says so and skips (DBLOCK_REQUIRE_DSN), whatever
/// DBLOCK_REQUIRE_SERVERS says: there is nothing of it to test.
/// (Defined in support/admin.cpp, the one support file compiled with the build's backends.)
bool is_built(std::string_view dialect);

/// The dialect whose server the environment variable `env_name` names (DBLOCK_TEST_PG_DSN, ...).
inline std::string_view dialect_of_env(std::string_view env_name) {
  if (env_name.find("MYSQL") != std::string_view::npos || env_name.find("GALERA") != std::string_view::npos)
    return "mysql";
  if (env_name.find("PG") != std::string_view::npos) return "postgresql";
  return "sqlite";
}

/// One backend/mode the database suites run against.
struct BackendCase {
  const char* label;
  const char* dialect;
  const char* dsn_env;  // server DSN from the environment; nullptr: an embedded database file
  dblock::LockMode mode = dblock::LockMode::table;
  const char* dsn_params = nullptr;     // dblock's URI parameters this case adds, e.g. pool_mode=transaction
  const char* admin_dsn_env = nullptr;  // where the test's own checks connect; nullptr: dsn_env
  const char* nodes_env = nullptr;      // a cluster's node DSNs, space-separated (dsn_env is the first)
};

inline void PrintTo(const BackendCase& backend, std::ostream* out) { *out << backend.label; }

inline const BackendCase kPostgresTable{"postgres_table", "postgresql", "DBLOCK_TEST_PG_DSN"};
inline const BackendCase kPostgresAdvisory{"postgres_advisory", "postgresql", "DBLOCK_TEST_PG_DSN",
                                           dblock::LockMode::advisory};
inline const BackendCase kMysqlTable{"mysql_table", "mysql", "DBLOCK_TEST_MYSQL_DSN"};
/// A three-node MariaDB Galera cluster (tools/testdb.sh start-galera): suites that open several
/// stores spread them over the nodes (node_dsns), so that managers on different nodes contend.
inline const BackendCase kGaleraTable{"galera_table", "mysql", "DBLOCK_TEST_GALERA_DSN", dblock::LockMode::table,
                                      nullptr,        nullptr, "DBLOCK_TEST_GALERA_DSNS"};
inline const BackendCase kMysqlAdvisory{"mysql_advisory", "mysql", "DBLOCK_TEST_MYSQL_DSN", dblock::LockMode::advisory};
inline const BackendCase kSqlite{"sqlite", "sqlite", nullptr};
/// SQLite with its writers queued in the process and requests combined (`writers=queued`).
inline const BackendCase kSqliteQueued{"sqlite_queued", "sqlite", nullptr, dblock::LockMode::table, "writers=queued"};
/// Table mode through PgBouncer in transaction mode; the test's own checks go to PostgreSQL directly.
inline const BackendCase kPgBouncerTable{"pgbouncer_table",           "postgresql",
                                         "DBLOCK_TEST_PGBOUNCER_DSN", dblock::LockMode::table,
                                         "pool_mode=transaction",     "DBLOCK_TEST_PG_DSN"};

/// The cases of `cases` whose backend this build holds, for INSTANTIATE_TEST_SUITE_P.
inline std::vector<BackendCase> built(std::initializer_list<BackendCase> cases) {
  std::vector<BackendCase> out;
  for (auto& backend : cases)
    if (is_built(backend.dialect)) out.push_back(backend);
  return out;
}

inline std::string with_params(const std::string& dsn, const std::string& params) {
  return dsn + (dsn.find('?') == std::string::npos ? "?" : "&") + params;
}

/// Where a test's own checks (Admin) connect for `backend`.
inline std::string admin_dsn(const BackendCase& backend, const std::string& server_dsn) {
  return backend.admin_dsn_env != nullptr ? env_or_empty(backend.admin_dsn_env) : server_dsn;
}

/// Where dblock's tables live by default: PostgreSQL's public schema, SQLite's main, MySQL's
/// database (the test servers' database is named dblock).
inline std::string default_schema(const BackendCase& backend) {
  std::string dialect = backend.dialect;
  return dialect == "sqlite" ? "main" : dialect == "mysql" ? "dblock" : "public";
}

inline void remove_embedded_sqlite_at(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}

/// A SQLite file per test process (ctest runs each test in its own process), removed when that
/// process exits: an installation drops only its own tables, and several share the file.
inline std::string embedded_sqlite_path() {
  struct RemovedAtExit {
    pid_t creator = getpid();
    std::string path = fmt::format("/tmp/dblock-test-{}.db", creator);
    // A file an earlier process of the same pid left (killed before its exit) is not this one's.
    RemovedAtExit() { remove_embedded_sqlite_at(path); }
    RemovedAtExit(const RemovedAtExit&) = delete;
    RemovedAtExit& operator=(const RemovedAtExit&) = delete;
    ~RemovedAtExit() {
      if (getpid() == creator) remove_embedded_sqlite_at(path);  // not in a forked child that exits
    }
  };
  static const RemovedAtExit file;
  return getpid() == file.creator ? file.path : fmt::format("/tmp/dblock-test-{}.db", getpid());
}

inline void remove_embedded_sqlite() { remove_embedded_sqlite_at(embedded_sqlite_path()); }

/// The port of a loopback TCP DSN `scheme://user:pw@127.0.0.1:PORT/db`, and the same DSN with
/// another port (to route it through a TcpProxy).
inline std::uint16_t dsn_port(const std::string& dsn) {
  auto at = dsn.find("@127.0.0.1:");
  if (at == std::string::npos) throw std::runtime_error("expects a loopback TCP DSN: " + dsn);
  return static_cast<std::uint16_t>(std::stoi(dsn.substr(at + 11)));
}
inline std::string with_port(const std::string& dsn, std::uint16_t port) {
  auto start = dsn.find("@127.0.0.1:") + 11;
  auto end = dsn.find_first_of("/?", start);
  return dsn.substr(0, start) + std::to_string(port) + (end == std::string::npos ? "" : dsn.substr(end));
}

/// `dsn` (a case's DSN, as DBLOCK_REQUIRE_BACKEND_DSN gives it) once per node of the case's
/// cluster, each with its node's port: {dsn} for a single server. Same user, database and
/// parameters on every node.
inline std::vector<std::string> node_dsns(const BackendCase& backend, const std::string& dsn) {
  if (backend.nodes_env == nullptr) return {dsn};
  std::vector<std::string> nodes;
  std::istringstream listed(env_or_empty(backend.nodes_env));
  for (std::string node; listed >> node;) nodes.push_back(with_port(dsn, dsn_port(node)));
  if (nodes.empty()) throw std::runtime_error(std::string(backend.nodes_env) + " lists no node");
  return nodes;
}

/// A TCP port that was free a moment ago on loopback, for a server the test starts next. Taken
/// below Linux's ephemeral range (32768-60999), where no client connection's local port can grab
/// it before the server binds it; spread by process so parallel tests rarely try the same one.
inline std::uint16_t free_port() {
  static std::atomic<int> next{0};
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto port = static_cast<std::uint16_t>(20000 + (getpid() * 37 + next++ * 7919) % 5000);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    close(fd);
    if (free) return port;
  }
  throw std::runtime_error("no free loopback port in 20000-24999");
}
/// A table prefix no other test (or test process) uses, so tests run in parallel on one database.
/// Random per process, not the pid: tools/test.sh runs five presets against the same servers,
/// threads use up pids too, and a reused pid met the tables an earlier process left (a history
/// with a future version, from the test that checks the refusal of a newer database).
/// Short, too: a GET_LOCK test needs 'dblock.<prefix>:' within 21 characters.
inline std::string unique_prefix() {
  static std::atomic<int> counter{0};
  static const std::string process_tag = [] {
    std::random_device random;
    std::string tag;
    for (int i = 0; i < 6; ++i) tag += "0123456789abcdefghijklmnopqrstuvwxyz"[random() % 36];
    return tag;
  }();
  return fmt::format("t{}_{}_", process_tag, counter++);
}

}  // namespace dblock::test

/// In a fixture's SetUp or a test: `dsn` gets the backend's DSN (a temp file for embedded ones),
/// or the test skips/fails.
#define DBLOCK_REQUIRE_BACKEND_DSN(dsn, backend)                                                       \
  do {                                                                                                 \
    if ((backend).dsn_env == nullptr)                                                                  \
      dsn = "sqlite://" + ::dblock::test::embedded_sqlite_path();                                      \
    else                                                                                               \
      DBLOCK_REQUIRE_DSN(dsn, (backend).dsn_env);                                                      \
    if ((backend).dsn_params != nullptr) dsn = ::dblock::test::with_params(dsn, (backend).dsn_params); \
  } while (0)

/// In a fixture's SetUp or a test: `dsn` gets the server's DSN, or the test skips/fails.
#define DBLOCK_REQUIRE_DSN(dsn, env_name)                                                                         \
  do {                                                                                                            \
    if (!::dblock::test::is_built(::dblock::test::dialect_of_env(env_name)))                                      \
      GTEST_SKIP() << "the " << ::dblock::test::dialect_of_env(env_name) << " backend is not part of this build"; \
    dsn = ::dblock::test::env_or_empty(env_name);                                                                 \
    if (dsn.empty()) {                                                                                            \
      if (::dblock::test::servers_required()) FAIL() << (env_name) << " is not set but DBLOCK_REQUIRE_SERVERS=1"; \
      GTEST_SKIP() << (env_name) << " is not set (start servers with tools/testdb.sh start)";                     \
    }                                                                                                             \
  } while (0)

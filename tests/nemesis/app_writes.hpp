#pragma once
// The application's write of the write nemesis, shared by its workers and its probe: one row per
// transaction, numbered by a per-name counter whose row lock orders the writers of a name, so that
// n is the commit order of the committed writes (read from the database, not from any clock).

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace dblock::test::app_writes {

inline std::string create_seq(const std::string& dialect, const std::string& prefix) {
  return fmt::format("CREATE TABLE {}app_seq (name VARCHAR(64) PRIMARY KEY, n BIGINT NOT NULL){}", prefix,
                     dialect == "mysql" ? " ENGINE = InnoDB" : "");
}
inline std::string create_writes(const std::string& dialect, const std::string& prefix) {
  return fmt::format(
      "CREATE TABLE {}app_writes (name VARCHAR(64) NOT NULL, token BIGINT NOT NULL, n BIGINT NOT NULL, "
      "PRIMARY KEY (name, n)){}",
      prefix, dialect == "mysql" ? " ENGINE = InnoDB" : "");
}

/// The two statements of one write, with their text parameters, as Store::fenced takes them.
struct Statement {
  std::string sql;
  std::vector<std::string> params;
};
inline std::vector<Statement> fenced_write(const std::string& dialect, const std::string& prefix,
                                           const std::string& name, std::int64_t token) {
  bool pg = dialect == "postgresql";
  auto mark = [&](int n) { return pg ? fmt::format("${}", n) : std::string("?"); };
  const char* integer = pg ? "bigint" : dialect == "mysql" ? "SIGNED" : "INTEGER";
  auto insert = fmt::format(
      "INSERT INTO {0}app_writes (name, token, n) SELECT name, CAST({1} AS {2}), n FROM {0}app_seq "
      "WHERE name = {3}",
      prefix, mark(2), integer, mark(1));
  // PostgreSQL numbers its parameters; MySQL and SQLite take them in order.
  return {{fmt::format("UPDATE {}app_seq SET n = n + 1 WHERE name = {}", prefix, mark(1)), {name}},
          {insert, pg ? std::vector<std::string>{name, std::to_string(token)}
                      : std::vector<std::string>{std::to_string(token), name}}};
}

/// The same write as plain SQL (names here are test literals without quotes).
inline std::vector<std::string> plain_write(const std::string& prefix, const std::string& name, std::int64_t token) {
  return {
      fmt::format("UPDATE {}app_seq SET n = n + 1 WHERE name = '{}'", prefix, name),
      fmt::format("INSERT INTO {0}app_writes (name, token, n) SELECT name, {1}, n FROM {0}app_seq WHERE name = '{2}'",
                  prefix, token, name)};
}

/// The documented fence statement (doc/sql-contract.md), first in the application's transaction.
inline std::string fence_call(const std::string& dialect, const std::string& prefix, const std::string& name,
                              std::int64_t token) {
  if (dialect == "postgresql") return fmt::format("SELECT \"public\".\"{}fence\"('{}', {})", prefix, name, token);
  if (dialect == "mysql") return fmt::format("SELECT `{}fence`('{}', {})", prefix, name, token);
  return fmt::format("INSERT INTO \"{}fence\" (name, token) VALUES ('{}', {})", prefix, name, token);
}

/// Every committed write as "name token n", one a row (the test admin reads one column).
inline std::string select_all(const std::string& dialect, const std::string& prefix) {
  return dialect == "mysql" ? fmt::format("SELECT CONCAT(name, ' ', token, ' ', n) FROM {}app_writes", prefix)
                            : fmt::format("SELECT name || ' ' || token || ' ' || n FROM {}app_writes", prefix);
}

inline std::string begin(const std::string& dialect) {
  return dialect == "mysql" ? "START TRANSACTION" : dialect == "sqlite" ? "BEGIN IMMEDIATE" : "BEGIN";
}

}  // namespace dblock::test::app_writes

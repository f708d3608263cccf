#pragma once
// A real database role of a test's own, as a DBA would create it for an application: created with
// no rights at all, given exactly the statements the test hands it, dropped at the end with
// everything granted to it. PostgreSQL roles and MySQL/MariaDB users.

#include <exception>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "support/admin.hpp"

namespace dblock::test {

class TestRole {
 public:
  /// `name` must be unique among concurrent tests (build it from unique_prefix()).
  TestRole(Admin& admin, std::string dialect, std::string server_dsn, std::string name)
      : admin_(admin), mysql_(dialect == "mysql"), server_dsn_(std::move(server_dsn)), name_(std::move(name)) {
    admin_.exec(mysql_ ? fmt::format("CREATE USER '{}'@'%' IDENTIFIED BY '{}'", name_, kPassword)
                       : fmt::format("CREATE ROLE \"{}\" LOGIN PASSWORD '{}'", name_, kPassword));
  }
  ~TestRole() {
    try {
      exec_granting(mysql_ ? fmt::format("DROP USER '{}'@'%'", name_)
                           : fmt::format("DROP OWNED BY \"{0}\"; DROP ROLE \"{0}\"", name_));
    } catch (...) {  // a failed test may have left the server unreachable: nothing more to clean
    }
  }
  TestRole(const TestRole&) = delete;
  TestRole& operator=(const TestRole&) = delete;

  /// What `--role` names: the role (PostgreSQL), the account user@% (MySQL).
  [[nodiscard]] std::string account() const { return mysql_ ? name_ + "@%" : name_; }
  /// The server DSN with this role's credentials (dblock's parameters appended by the caller).
  [[nodiscard]] std::string dsn() const {
    auto user_start = server_dsn_.find("://") + 3;
    return server_dsn_.substr(0, user_start) + name_ + ":" + kPassword + server_dsn_.substr(server_dsn_.find('@'));
  }
  /// Runs every line of `script` that starts with GRANT, one statement each (comments skipped).
  /// Returns how many it ran.
  int grant(const std::string& script) {
    std::istringstream lines(script);
    int ran = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("GRANT ", 0) != 0) continue;
      if (!line.empty() && line.back() == ';') line.pop_back();
      exec_granting(line);
      ++ran;
    }
    return ran;
  }
  /// Runs one statement as the admin with `{role}` replaced by this role's grantee.
  void exec(const std::string& sql_with_role) {
    auto grantee = mysql_ ? fmt::format("'{}'@'%'", name_) : fmt::format("\"{}\"", name_);
    std::string sql = sql_with_role;
    for (std::size_t at; (at = sql.find("{role}")) != std::string::npos;) sql.replace(at, 6, grantee);
    exec_granting(sql);
  }

 private:
  /// PostgreSQL refuses a GRANT on an object whose ACL another session's GRANT is changing at the
  /// same moment ("tuple concurrently updated"; tests run in parallel and share schema public):
  /// run it again, a bounded number of times.
  void exec_granting(const std::string& sql) {
    for (int attempt = 1;; ++attempt) {
      try {
        admin_.exec(sql);
        return;
      } catch (const std::exception& e) {
        if (attempt == 50 || std::string(e.what()).find("tuple concurrently updated") == std::string::npos) throw;
      }
    }
  }

  static constexpr const char* kPassword = "rolepw";
  Admin& admin_;
  bool mysql_;
  std::string server_dsn_;
  std::string name_;
};

}  // namespace dblock::test

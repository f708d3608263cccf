#pragma once
// The set-up every database suite shares: a dblock installation of the test's own (a unique table
// prefix on the server), migrated, a store on it, and the test's admin on the same tables.

#include <memory>
#include <string>
#include <string_view>

#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/servers.hpp"

namespace dblock::test {

/// How an installation is set up: URI parameters of its store ("pool=12"), and whether it is
/// migrated (false: the migration suites start from nothing).
struct InstallationSetup {
  std::string store_params;
  bool migrated = true;
};

class Installation {
 public:
  /// `backend`'s case on `server_dsn` as DBLOCK_REQUIRE_BACKEND_DSN gives it (the case's URI
  /// parameters included); the admin connects where the case says.
  Installation(const BackendCase& backend, const std::string& server_dsn, InstallationSetup setup = {})
      : server_dsn_(server_dsn), prefix_(unique_prefix()) {
    open(setup);
    admin_ = make_admin(backend.dialect, admin_dsn(backend, server_dsn), default_schema(backend), prefix_);
  }
  /// A dialect-only suite's installation on `server_dsn` ("postgresql", "mysql" or "sqlite").
  Installation(const std::string& dialect, const std::string& server_dsn, InstallationSetup setup = {})
      : server_dsn_(server_dsn), prefix_(unique_prefix()) {
    open(setup);
    admin_ = make_admin(dialect, server_dsn, dialect == "mysql" ? "dblock" : dialect == "sqlite" ? "main" : "public",
                        prefix_);
  }

  /// The server DSN with this installation's prefix and `extra` URI parameters ("pool=1&...").
  [[nodiscard]] std::string dsn(std::string_view extra = {}) const {
    return with_params(server_dsn_, "prefix=" + prefix_ + (extra.empty() ? "" : "&" + std::string(extra)));
  }
  [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }
  [[nodiscard]] const std::shared_ptr<Store>& store() const noexcept { return store_; }
  [[nodiscard]] Admin& admin() const noexcept { return *admin_; }

 private:
  void open(const InstallationSetup& setup) {
    store_ = Store::open(dsn(setup.store_params));
    if (setup.migrated) migrate(*store_);
  }

  std::string server_dsn_;
  std::string prefix_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<Admin> admin_;
};

}  // namespace dblock::test

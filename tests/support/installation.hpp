#pragma once
// The set-up every database suite shares: a dblock installation of the test's own (a unique table
// prefix on the server), migrated, a store on it, and the test's admin on the same tables.

#include <memory>
#include <string>
#include <string_view>

#include <dblock/dblock.hpp>
#include <gtest/gtest.h>

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

/// A suite run once per backend case: the case's server (required), an installation of the test's
/// own on it, and managers in the case's mode.
class InstalledCaseTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  static void TearDownTestSuite() { remove_embedded_sqlite(); }

  void SetUp() override {
    DBLOCK_REQUIRE_BACKEND_DSN(server_dsn_, GetParam());
    installation_ = std::make_unique<Installation>(GetParam(), server_dsn_);
    store_ = installation_->store();
  }

  [[nodiscard]] ManagerOptions in_mode(ManagerOptions options = {}) const {
    options.mode = GetParam().mode;
    return options;
  }
  [[nodiscard]] std::unique_ptr<LockManager> manager(ManagerOptions options = {}) const {
    return std::make_unique<LockManager>(store_, in_mode(std::move(options)));
  }

  std::string server_dsn_;
  std::unique_ptr<Installation> installation_;
  std::shared_ptr<Store> store_;
};

}  // namespace dblock::test

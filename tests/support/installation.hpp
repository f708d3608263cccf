#pragma once
// The set-up every database suite shares: a dblock installation of the test's own (a unique table
// prefix on the server), migrated, a store on it, and the test's admin on the same tables.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/servers.hpp"

namespace dblock::test {

/// How an installation is set up: URI parameters of its store ("pool=12") and its options, whether
/// it is migrated (false: the migration suites start from nothing), and whether the store stays
/// open (false: migrated, then dropped, for a test that forks, restarts its server or opens its
/// stores elsewhere; without migrating no store is opened at all).
struct InstallationSetup {
  std::string store_params;
  bool migrated = true;
  StoreOptions store_options{};
  bool keep_store = true;
};

class Installation {
 public:
  /// `backend`'s case on `server_dsn` as DBLOCK_REQUIRE_BACKEND_DSN gives it (the case's URI
  /// parameters included); the admin connects where the case says.
  Installation(const BackendCase& backend, const std::string& server_dsn, InstallationSetup setup = {})
      : Installation(backend, std::vector<std::string>{server_dsn}, std::move(setup)) {}
  /// One installation on a cluster's `nodes` (node_dsns): one prefix, migrated once through the
  /// first node, where the store and the admin are; stores_on_nodes() adds one on every other node.
  Installation(const BackendCase& backend, std::vector<std::string> nodes, InstallationSetup setup = {})
      : nodes_(std::move(nodes)), prefix_(unique_prefix()), setup_(std::move(setup)) {
    open();
    admin_ = make_admin(backend.dialect, admin_dsn(backend, nodes_.front()), default_schema(backend), prefix_);
  }
  /// A dialect-only suite's installation on `server_dsn` ("postgresql", "mysql" or "sqlite").
  Installation(const std::string& dialect, const std::string& server_dsn, InstallationSetup setup = {})
      : Installation(dialect, std::vector<std::string>{server_dsn}, std::move(setup)) {}
  /// A dialect-only suite's installation on a cluster's `nodes`, as above.
  Installation(const std::string& dialect, std::vector<std::string> nodes, InstallationSetup setup = {})
      : nodes_(std::move(nodes)), prefix_(unique_prefix()), setup_(std::move(setup)) {
    open();
    admin_ = make_admin(dialect, nodes_.front(), schema_of(dialect), prefix_);
  }

  /// The server DSN with this installation's prefix and `extra` URI parameters ("pool=1&...").
  [[nodiscard]] std::string dsn(std::string_view extra = {}) const { return dsn_on(nodes_.front(), extra); }
  /// This installation on another endpoint of the same database: a TcpProxy's port (with_port), a
  /// pooler, another node of the cluster.
  [[nodiscard]] std::string dsn_on(const std::string& server_dsn, std::string_view extra = {}) const {
    return with_params(server_dsn, "prefix=" + prefix_ + (extra.empty() ? "" : "&" + std::string(extra)));
  }
  /// Another store on this installation, beside store() (its own pool).
  [[nodiscard]] std::shared_ptr<Store> open_store(std::string_view extra = {}, StoreOptions options = {}) const {
    return Store::open(dsn(extra), std::move(options));
  }
  /// store() and one more store on each other node, with the set-up's parameters and options.
  [[nodiscard]] std::vector<std::shared_ptr<Store>> stores_on_nodes() const {
    std::vector<std::shared_ptr<Store>> stores{store_};
    for (std::size_t i = 1; i < nodes_.size(); ++i)
      stores.push_back(Store::open(dsn_on(nodes_[i], setup_.store_params), setup_.store_options));
    return stores;
  }
  [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }
  [[nodiscard]] const std::vector<std::string>& nodes() const noexcept { return nodes_; }
  [[nodiscard]] const std::shared_ptr<Store>& store() const noexcept { return store_; }
  [[nodiscard]] Admin& admin() const noexcept { return *admin_; }

 private:
  /// Where dblock's tables live by default, as default_schema() says for a case.
  static std::string schema_of(const std::string& dialect) {
    return dialect == "mysql" ? "dblock" : dialect == "sqlite" ? "main" : "public";
  }
  void open() {
    if (!setup_.migrated && !setup_.keep_store) return;
    store_ = Store::open(dsn(setup_.store_params), setup_.store_options);
    if (setup_.migrated) migrate(*store_);
    if (!setup_.keep_store) store_.reset();
  }

  std::vector<std::string> nodes_;
  std::string prefix_;
  InstallationSetup setup_;
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
  /// The lock table's row for `name` as Store::locks() lists it, or nothing.
  [[nodiscard]] std::optional<LockInfo> row(const std::string& name) const {
    for (auto& info : store_->locks())
      if (info.name == name) return info;
    return std::nullopt;
  }

  std::string server_dsn_;
  std::unique_ptr<Installation> installation_;
  std::shared_ptr<Store> store_;
};

}  // namespace dblock::test

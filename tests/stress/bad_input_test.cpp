// Hostile input, table-driven, on every backend: each case must give its documented error, and the
// database must be left exactly as it was (no row written, no schema touched).

#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

class BadInput : public ::testing::TestWithParam<dblock::test::BackendCase> {
 protected:
  static void TearDownTestSuite() { dblock::test::remove_embedded_sqlite(); }

  void SetUp() override {
    DBLOCK_REQUIRE_BACKEND_DSN(server_dsn_, GetParam());
    sqlite_ = std::string(GetParam().dialect) == "sqlite";
    installation_ = std::make_unique<dblock::test::Installation>(GetParam(), server_dsn_);
    prefix_ = installation_->prefix();
    store_ = installation_->store();
    admin_ = &installation_->admin();
  }

  [[nodiscard]] std::string dsn(const std::string& prefix) const {
    return dblock::test::with_params(server_dsn_, "prefix=" + prefix);
  }

  template <class Fn>
  static std::optional<dblock::ErrorCategory> category_of(Fn&& fn) {
    try {
      fn();
    } catch (const dblock::Error& e) {
      return e.category();
    }
    return std::nullopt;
  }

  std::string server_dsn_;
  std::string prefix_;
  bool sqlite_ = false;
  std::shared_ptr<dblock::Store> store_;
  std::unique_ptr<dblock::test::Installation> installation_;
  dblock::test::Admin* admin_ = nullptr;
};

TEST_P(BadInput, HostileNamesAndTtlsAreRefusedAndWriteNothing) {
  dblock::LockManager locks(store_);
  using C = dblock::ErrorCategory;
  struct Case {
    std::string label;
    std::function<void()> call;
    C expected;
  };
  std::vector<Case> cases{
      {"empty name", [&] { (void)locks.try_acquire(""); }, C::invalid_argument},
      {"10 KB name", [&] { (void)locks.try_acquire(std::string(10 * 1024, 'n')); }, C::invalid_argument},
      {"256-byte name", [&] { (void)locks.try_acquire(std::string(256, 'n')); }, C::invalid_argument},
      {"NUL in name", [&] { (void)locks.try_acquire(std::string("a\0b", 3)); }, C::invalid_argument},
      {"invalid UTF-8", [&] { (void)locks.try_acquire("\xc3\x28"); }, C::invalid_argument},
      {"overlong UTF-8", [&] { (void)locks.try_acquire("\xe0\x80\xaf"); }, C::invalid_argument},
      {"ttl 0 via manager", [&] { dblock::LockManager bad(store_, {.default_ttl = 0ms}); }, C::invalid_argument},
      {"negative ttl", [&] { (void)locks.try_acquire("x", {.ttl = -5s}); }, C::invalid_argument},
      {"ttl overflow", [&] { (void)locks.try_acquire("x", {.ttl = std::chrono::milliseconds::max()}); },
       C::invalid_argument},
      {"ttl below renew", [&] { (void)locks.try_acquire("x", {.ttl = 5s}); }, C::invalid_argument},
      {"negative timeout", [&] { (void)locks.acquire("x", -1ms); }, C::invalid_argument},
      {"force release of empty", [&] { store_->force_release(""); }, C::invalid_argument},
  };
  for (auto& c : cases) EXPECT_EQ(category_of(c.call), c.expected) << c.label;
  EXPECT_TRUE(store_->locks().empty()) << "bad input must not write";

  // Hostile but valid names are data, never SQL: they round-trip exactly.
  std::vector<std::string> valid{"'; DROP TABLE " + prefix_ + "locks; --",
                                 "\" OR 1=1 --",
                                 "{a,b}",
                                 "NULL",
                                 "\\x00\\",
                                 "\xF0\x9F\x94\x92 lock \xF0\x9F\x98\x80",
                                 "a ",
                                 "A",
                                 std::string(255, 'z')};
  std::vector<dblock::Lock> held;
  for (auto& name : valid) {
    auto lock = locks.try_acquire(name);
    ASSERT_TRUE(lock) << name;
    held.push_back(std::move(*lock));
  }
  auto rows = store_->locks();
  ASSERT_EQ(rows.size(), valid.size()) << "'a ' and 'a', 'A' and 'a' are distinct names";
  for (auto& name : valid)
    EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [&](auto& row) { return row.name == name; })) << name;
  EXPECT_TRUE(admin_->table_exists(prefix_ + "locks")) << "the table survived the hostile names";
}

TEST_P(BadInput, HostileDsnsGiveTheirDocumentedErrors) {
  using C = dblock::ErrorCategory;
  std::vector<std::pair<std::string, C>> cases{
      {"", C::invalid_argument},
      {"localhost:5432", C::invalid_argument},
      {"mongodb://h/db", C::invalid_argument},
      {server_dsn_ + "?pool=-1", C::invalid_argument},
      {server_dsn_ + "?prefix=x;drop", C::invalid_argument},
      {server_dsn_ + "?schema=Bad", C::invalid_argument},
  };
  if (sqlite_) {
    cases.push_back({"sqlite://", C::invalid_argument});
    cases.push_back({"sqlite:///no/such/dir/x.db", C::connection});
    cases.push_back({server_dsn_ + "?schema=other", C::invalid_argument});
  } else {
    auto wrong_password = server_dsn_;
    auto colon = wrong_password.find(':', wrong_password.find("://") + 3);
    wrong_password.replace(colon + 1, wrong_password.find('@') - colon - 1, "wrong");
    auto missing_database = server_dsn_.substr(0, server_dsn_.rfind('/')) + "/no_such_database";
    cases.push_back({wrong_password, C::connection});
    cases.push_back({dblock::test::with_port(server_dsn_, 1), C::connection});
    cases.push_back({missing_database, C::connection});
  }
  for (auto& [uri, expected] : cases)
    EXPECT_EQ(category_of([&] { (void)dblock::Store::open(uri, {.connect_timeout = 3s}); }), expected) << uri;
}

TEST_P(BadInput, MissingOutdatedAndNewerSchemasAreRefusedUntouched) {
  auto reason_of = [&](const std::shared_ptr<dblock::Store>& store) -> std::optional<dblock::SchemaError::Reason> {
    try {
      dblock::LockManager refused(store);
    } catch (const dblock::SchemaError& e) {
      return e.reason();
    }
    return std::nullopt;
  };
  EXPECT_EQ(reason_of(dblock::Store::open(dsn(dblock::test::unique_prefix()))), dblock::SchemaError::Reason::missing);

  auto history = admin_->history_table();
  auto latest = dblock::latest_schema_version();
  // As if an older build had migrated: the latest version's record hidden as version 0.
  admin_->exec(fmt::format("UPDATE {} SET version = 0 WHERE version = {}", history, latest));
  EXPECT_EQ(reason_of(dblock::Store::open(dsn(prefix_))), dblock::SchemaError::Reason::outdated);
  admin_->exec(fmt::format("UPDATE {} SET version = {} WHERE version = 0", history, latest));
  admin_->exec(
      fmt::format("INSERT INTO {} (version, name, checksum, applied_by, execution_ms, success) "
                  "VALUES ({}, 'from_the_future', 'x', 'test', 0, {})",
                  history, latest + 1, sqlite_ ? "1" : "true"));
  EXPECT_EQ(reason_of(dblock::Store::open(dsn(prefix_))), dblock::SchemaError::Reason::newer);
  EXPECT_EQ(admin_->query("SELECT count(*) FROM " + history).at(0), std::to_string(latest + 1))
      << "refusing changed nothing";
  EXPECT_TRUE(store_->locks().empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, BadInput,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace

// A read-only PostgreSQL (a hot standby, or default_transaction_read_only) gives an error naming the
// cause. Directly connected, libpq's target_session_attrs=read-write (dblock's default) refuses the
// session at connect; a URI that sets target_session_attrs=any meets the refusal at the first write.

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

class ReadOnly : public ::testing::Test {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_DSN(dsn_, "DBLOCK_TEST_PG_DSN");
    installation_ = std::make_unique<dblock::test::Installation>("postgresql", dsn_,
                                                                 dblock::test::InstallationSetup{.keep_store = false});
  }
  [[nodiscard]] std::string read_only(const std::string& extra = "") const {
    return installation_->dsn("options=-c%20default_transaction_read_only%3Don" + extra);
  }

  std::string dsn_;
  std::unique_ptr<dblock::test::Installation> installation_;
};

TEST_F(ReadOnly, AReadOnlyServerIsRefusedAtConnectNamingTheCause) {
  try {
    (void)dblock::Store::open(read_only());
    FAIL() << "a read-only session must not be taken";
  } catch (const dblock::ConnectionError& e) {
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("primary"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("dblockpw"), std::string::npos) << e.what();
  }
}

TEST_F(ReadOnly, AWriteOnAReadOnlySessionNamesTheCause) {
  auto store = dblock::Store::open(read_only("&target_session_attrs=any"));
  dblock::LockManager locks(store);
  try {
    (void)locks.try_acquire("on-a-standby");
    FAIL() << "a write on a read-only session must fail";
  } catch (const dblock::DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("primary"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(store->locks().empty()) << "reads still work, and nothing was written";
}

}  // namespace

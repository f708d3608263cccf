#pragma once
// A PostgreSQL store with dblock's tables under a prefix of its own, for the observability tests.

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/servers.hpp"

namespace dblock::test {

class PgObservability : public ::testing::Test {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_DSN(server_dsn_, "DBLOCK_TEST_PG_DSN");
    prefix_ = unique_prefix();
    dsn_ = with_params(server_dsn_, "prefix=" + prefix_);
    store_ = Store::open(dsn_);
    migrate(*store_);
    admin_ = make_admin("postgresql", server_dsn_, "public", prefix_);
  }

  std::string server_dsn_, prefix_, dsn_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<Admin> admin_;
};

}  // namespace dblock::test

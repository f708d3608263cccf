#pragma once
// A PostgreSQL store with dblock's tables under a prefix of its own, for the observability tests:
// the shared Installation, under the names these tests use.

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/installation.hpp"
#include "support/servers.hpp"

namespace dblock::test {

class PgObservability : public ::testing::Test {
 protected:
  void SetUp() override {
    DBLOCK_REQUIRE_DSN(server_dsn_, "DBLOCK_TEST_PG_DSN");
    installation_ = std::make_unique<Installation>("postgresql", server_dsn_);
    prefix_ = installation_->prefix();
    dsn_ = installation_->dsn();
    store_ = installation_->store();
    admin_ = &installation_->admin();
  }

  std::string server_dsn_, prefix_, dsn_;
  std::unique_ptr<Installation> installation_;
  std::shared_ptr<Store> store_;
  Admin* admin_ = nullptr;
};

}  // namespace dblock::test

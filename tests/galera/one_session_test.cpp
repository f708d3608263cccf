// Every statement set of a Galera store on one session (pool=1), twice over: the engine check at
// connect, table mode, groups (by stored procedure), combined statements, migrations, occurrence
// records, a fenced transaction, the reaper and the bench floor. A session caches its prepared
// statements by id, so two texts under one id would run the wrong one and fail here.

#include <string>

#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/every_statement_set.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

namespace {

TEST(GaleraOneSession, EveryStatementSetSharesOneSessionWithoutTheirPreparedStatementsColliding) {
  std::string node;
  DBLOCK_REQUIRE_DSN(node, "DBLOCK_TEST_GALERA_DSN");
  auto one_session =
      dblock::Store::open(dblock::test::with_params(node, "prefix=" + dblock::test::unique_prefix() + "&pool=1"));
  dblock::migrate(*one_session);
  for (int round = 0; round < 2; ++round) {
    dblock::test::run_every_statement_set(one_session, round);
    if (HasFatalFailure()) return;
  }
}

}  // namespace

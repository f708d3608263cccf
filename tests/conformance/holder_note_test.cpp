// Holders' notes (LockOptions::note, `dblock run --note`) on every backend in table mode: shown
// beside their holder, escaped in text and JSON, kept by a re-entry, never inherited by a later
// grant of the name (a takeover after the lease ended), refused where no row could keep them.

#include <chrono>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "support/cli_case.hpp"
#include "support/eventually.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

class HolderNote : public dblock::test::CliCaseTest {};

TEST_P(HolderNote, ANoteIsShownBesideItsHolderEscapedAndKeptByAReEntryOnly) {
  auto a = manager({.default_ttl = 20s});
  auto held = a->acquire("noted", 5s, {.note = "deploy v2 \x1b[2J by ci"});
  auto row = store_->lock("noted");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->note, "deploy v2 \x1b[2J by ci");
  {
    auto again = a->acquire("noted", 5s, {.note = "another"});
    EXPECT_EQ(store_->lock("noted")->note, "deploy v2 \x1b[2J by ci") << "a re-entry keeps the first level's note";
  }
  auto text = cli({"locks"});
  EXPECT_NE(text.output.find("  NOTE"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("deploy v2 \\x1b[2J by ci"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find('\x1b'), std::string::npos) << "no raw control character: " << text.output;
  auto json = cli({"locks", "--json"});
  EXPECT_NE(json.output.find("\"note\":\"deploy v2 \\u001b[2J by ci\""), std::string::npos) << json.output;

  auto plain = a->acquire("plain", 5s);
  EXPECT_EQ(store_->lock("plain")->note, "");
  EXPECT_THROW((void)a->try_acquire("sem", {.permits = 2, .note = "x"}), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire("bad", {.note = std::string(256, 'n')}), dblock::InvalidArgument);
  EXPECT_THROW((void)a->try_acquire("bad", {.note = "\xff"}), dblock::InvalidArgument);
  EXPECT_FALSE(store_->lock("sem")) << "refused before anything was sent";
}

TEST_P(HolderNote, ALaterGrantOfTheNameDoesNotShowTheNoteOfTheGrantBefore) {
  auto a = manager({.default_ttl = 20s});
  auto held = a->acquire("taken-over", 5s, {.note = "the first holder"});
  ASSERT_EQ(store_->lock("taken-over")->note, "the first holder");
  installation_->admin().expire("taken-over");  // as a holder that stopped renewing leaves it
  auto b = manager({.default_ttl = 20s});
  auto next = b->try_acquire("taken-over");
  ASSERT_TRUE(next) << "taken over";
  auto row = store_->lock("taken-over");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->token, next->token());
  EXPECT_EQ(row->note, "") << "the note was the grant before's";
}

TEST_P(HolderNote, RunNotesItsHostPidAndCommandUnlessToldOtherwise) {
  auto started = dir_ / "started";
  auto holder = start_cli({"run", "--name", "noted-run", "--ttl", "5s", "--", "sh", "-c",
                           "touch " + started.string() + "; sleep 30 & wait"});
  ASSERT_TRUE(dblock::test::eventually([&] { return std::filesystem::exists(started); })) << holder.output();
  auto row = store_->lock("noted-run");
  ASSERT_TRUE(row);
  EXPECT_NE(row->note.find(fmt::format(" pid {}: sh -c touch ", holder.pid())), std::string::npos) << row->note;
  EXPECT_EQ(cli({"release", "--force", "noted-run"}).exit_code, 0);
  EXPECT_EQ(holder.finish().exit_code, 70);
  auto told = cli({"run", "--name", "told", "--note", "nightly report", "--", "sh", "-c", "true"});
  EXPECT_EQ(told.exit_code, 0) << told.output;
  EXPECT_EQ(cli({"run", "--name", "x", "--permits", "2", "--note", "n", "--", "true"}).exit_code, 64);
  EXPECT_EQ(cli({"run", "--name", "x", "--permits", "2", "--", "true"}).exit_code, 0) << "no default note there";
}

INSTANTIATE_TEST_SUITE_P(Backends, HolderNote,
                         ::testing::ValuesIn(dblock::test::built(
                             {dblock::test::kPostgresTable, dblock::test::kMysqlTable, dblock::test::kSqlite,
                              dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace

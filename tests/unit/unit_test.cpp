// Pure logic, no database: parsers, validation, backoff, placeholders.

#include <gtest/gtest.h>

#include <array>
#include <latch>
#include <set>
#include <thread>
#include <vector>

#include <dblock/advisory_key.hpp>
#include <dblock/errors.hpp>

#include "backends/mysql/my_script.hpp"
#include "base/duration.hpp"
#include "base/uri.hpp"
#include "base/validate.hpp"
#include "core/backoff.hpp"
#include "core/retry.hpp"
#include "migrate/migration_lock.hpp"
#if DBLOCK_TEST_WITH_POSTGRES
#include "backends/postgres/pg_connection.hpp"
#endif
#include "base/sql_template.hpp"

using namespace std::chrono_literals;
using namespace dblock::detail;

TEST(Duration, ParsesUnits) {
  EXPECT_EQ(parse_duration("500ms"), 500ms);
  EXPECT_EQ(parse_duration("30s"), 30s);
  EXPECT_EQ(parse_duration("5m"), 5min);
  EXPECT_EQ(parse_duration("2h"), 2h);
  EXPECT_EQ(parse_duration("0"), 0ms);
}

TEST(Duration, RejectsBadText) {
  for (const char* bad : {"", "5", "-5s", "5x", "s", "1.5s", "5 s", "99999999999999999999s", "9223372036854775807h"})
    EXPECT_THROW((void)parse_duration(bad), dblock::InvalidArgument) << bad;
}

TEST(Duration, Formats) {
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(30s), "30s");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  EXPECT_EQ(format_duration(5min), "5m");
}

TEST(LockName, Rules) {
  EXPECT_NO_THROW(validate_lock_name("orders/42"));
  EXPECT_NO_THROW(validate_lock_name(std::string(255, 'a')));
  EXPECT_NO_THROW(validate_lock_name("caf\xC3\xA9 \xF0\x9F\x94\x92"));
  EXPECT_THROW(validate_lock_name(""), dblock::InvalidArgument);
  EXPECT_THROW(validate_lock_name(std::string(256, 'a')), dblock::InvalidArgument);
  EXPECT_THROW(validate_lock_name(std::string("a\0b", 3)), dblock::InvalidArgument);
  EXPECT_THROW(validate_lock_name("\xC3"), dblock::InvalidArgument);          // truncated sequence
  EXPECT_THROW(validate_lock_name("\xC0\xAF"), dblock::InvalidArgument);      // overlong
  EXPECT_THROW(validate_lock_name("\xED\xA0\x80"), dblock::InvalidArgument);  // surrogate
}

TEST(Ttl, Rules) {
  EXPECT_NO_THROW(validate_ttl(30s, 10s));
  EXPECT_THROW(validate_ttl(0ms, 0ms), dblock::InvalidArgument);
  EXPECT_THROW(validate_ttl(-5s, 0ms), dblock::InvalidArgument);
  EXPECT_THROW(validate_ttl(29s, 10s), dblock::InvalidArgument);
  EXPECT_THROW(validate_ttl(std::chrono::hours(24 * 31), 0ms), dblock::InvalidArgument);
}

TEST(Identifier, Rules) {
  EXPECT_NO_THROW(validate_identifier("prefix", "dblock_", 40, false));
  EXPECT_NO_THROW(validate_identifier("prefix", "", 40, true));
  for (const char* bad : {"Upper", "1abc", "a-b", "a b", "a\"b", "a;drop"})
    EXPECT_THROW(validate_identifier("prefix", bad, 40, false), dblock::InvalidArgument) << bad;
  EXPECT_THROW(validate_identifier("schema", std::string(64, 'a'), 63, false), dblock::InvalidArgument);
}

TEST(Uri, SplitsDblockParametersFromDriverOnes) {
  auto uri = parse_store_uri("postgresql://u:secret@h:5432/db?schema=locks&sslmode=disable&prefix=app_&pool=4");
  EXPECT_EQ(uri.dialect, Dialect::postgresql);
  EXPECT_EQ(uri.schema, "locks");
  EXPECT_EQ(uri.prefix, "app_");
  EXPECT_EQ(uri.pool_size, 4u);
  EXPECT_EQ(uri.driver_uri, "postgresql://u:secret@h:5432/db?sslmode=disable");
  EXPECT_EQ(uri.redacted.find("secret"), std::string::npos);
}

TEST(Uri, RejectsMalformedAndNeverEchoesPasswords) {
  for (const char* bad :
       {"", "localhost", "://x", "ftp://x", "postgresql://u:topsecret@h/db?pool=0",
        "postgresql://u:topsecret@h/db?pool=x", "postgresql://u:topsecret@h/db?schema", "sqlite://"}) {
    try {
      (void)parse_store_uri(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const dblock::InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).find("topsecret"), std::string::npos) << e.what();
    }
  }
}

TEST(Uri, Redaction) {
  EXPECT_EQ(redact_uri("postgresql://u:pw@h/db"), "postgresql://u:***@h/db");
  EXPECT_EQ(redact_uri("postgresql://u@h/db?password=pw&x=1"), "postgresql://u@h/db?password=***&x=1");
  EXPECT_EQ(redact_uri("postgresql://h1:5432,h2:5433/db"), "postgresql://h1:5432,h2:5433/db");
}

TEST(Backoff, GrowsWithJitterWithinBounds) {
  Backoff backoff(10ms, 2.0, 100ms, 42);
  std::chrono::milliseconds previous_cap = 10ms;
  for (int i = 0; i < 20; ++i) {
    auto delay = backoff.next();
    EXPECT_GE(delay, std::chrono::milliseconds(1));
    EXPECT_LE(delay, 100ms);
    EXPECT_GE(delay, previous_cap / 2 - 1ms);
    previous_cap = std::min(previous_cap * 2 + 1ms, std::chrono::milliseconds(100));
  }
}

TEST(Placeholders, FillsSchemaAndPrefixOnly) {
  EXPECT_EQ(fill_placeholders("CREATE TABLE \"{schema}\".\"{prefix}locks\" -- {other}", "s", "p_"),
            "CREATE TABLE \"s\".\"p_locks\" -- {other}");
}

TEST(AdvisoryKey, NamesHashWithTheDocumentedFnv1a64) {
  // Pinned values: doc/advisory.md documents the function so other languages compute the same keys.
  EXPECT_EQ(dblock::AdvisoryKey::from_name("orders/42").key(), -6475162556055330337);
  EXPECT_EQ(dblock::AdvisoryKey::from_name("job").key(), 4999694984129765468);
  EXPECT_EQ(dblock::AdvisoryKey::from_name("").key(), -3750763034362895579);  // the offset basis
  EXPECT_FALSE(dblock::AdvisoryKey::from_name("job").two_part());
}

TEST(AdvisoryKey, TheTwoKeySpacesStayApart) {
  auto single = dblock::AdvisoryKey::of(42);
  auto pair = dblock::AdvisoryKey::of(0, 42);
  EXPECT_NE(single, pair);
  EXPECT_TRUE(pair.two_part());
  EXPECT_EQ(single.to_string(), "key:42");
  EXPECT_EQ(dblock::AdvisoryKey::of(-7, 42).to_string(), "key:-7,42");
  EXPECT_EQ(dblock::AdvisoryKey::of(std::int64_t{-1}).key(), -1);
}

TEST(MySqlScript, SplitsStatementsAndKeepsStoredProgramBodiesWhole) {
  auto statements = dblock::detail::split_mysql_script(
      "-- a comment line\n"
      "CREATE TABLE t (x int);\n"
      "\n"
      "CREATE OR REPLACE FUNCTION f()\n"
      "RETURNS int\n"
      "BEGIN\n"
      "  DECLARE v INT;\n"
      "  RETURN 1;\n"
      "END;\n"
      "DO 1;\n"
      "SELECT 'no semicolon at the end'\n");
  ASSERT_EQ(statements.size(), 4u);
  EXPECT_EQ(statements[0], "CREATE TABLE t (x int)");
  EXPECT_EQ(statements[1], "CREATE OR REPLACE FUNCTION f()\nRETURNS int\nBEGIN\n  DECLARE v INT;\n  RETURN 1;\nEND");
  EXPECT_EQ(statements[2], "DO 1");
  EXPECT_EQ(statements[3], "SELECT 'no semicolon at the end'\n");
}

TEST(Uri, MySqlTakesTheDatabaseAsItsSchemaAndRefusesAnother) {
  auto uri = dblock::detail::resolve_store_uri("mysql://u:pw@127.0.0.1:3306/app?prefix=p_", {});
  EXPECT_EQ(uri.dialect, Dialect::mysql);
  EXPECT_TRUE(uri.schema.empty());
  EXPECT_EQ(uri.prefix, "p_");
  EXPECT_THROW((void)dblock::detail::resolve_store_uri("mysql://u:pw@127.0.0.1:3306/app?schema=other", {}),
               dblock::InvalidArgument);
}

TEST(Uri, EngineGaleraIsForMysqlAndNamesTheOnlyEngineItKnows) {
  EXPECT_TRUE(dblock::detail::resolve_store_uri("mysql://u@127.0.0.1/app?engine=galera", {}).galera);
  EXPECT_FALSE(dblock::detail::resolve_store_uri("mysql://u@127.0.0.1/app", {}).galera);
  EXPECT_THROW((void)dblock::detail::resolve_store_uri("mysql://u@127.0.0.1/app?engine=ndb", {}),
               dblock::InvalidArgument);
  EXPECT_THROW((void)dblock::detail::resolve_store_uri("postgresql://u@127.0.0.1/app?engine=galera", {}),
               dblock::InvalidArgument);
}

TEST(Uri, WritersQueuedIsForSqliteAndNamesItsTwoValues) {
  using dblock::detail::resolve_store_uri;
  EXPECT_TRUE(resolve_store_uri("sqlite:///tmp/x.db?writers=queued", {}).queued_writers);
  EXPECT_FALSE(resolve_store_uri("sqlite:///tmp/x.db?writers=direct", {}).queued_writers);
  EXPECT_FALSE(resolve_store_uri("sqlite:///tmp/x.db", {}).queued_writers);
  EXPECT_EQ(resolve_store_uri("sqlite:///tmp/x.db?writers=queued&pool=32", {}).driver_uri, "/tmp/x.db");
  try {
    (void)resolve_store_uri("sqlite:///tmp/x.db?writers=fast", {});
    ADD_FAILURE() << "writers=fast was accepted";
  } catch (const dblock::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("must be queued or direct"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)resolve_store_uri("postgresql://u@127.0.0.1/app?writers=queued", {}), dblock::InvalidArgument);
}

#if DBLOCK_TEST_WITH_POSTGRES
TEST(PgEngine, CockroachAndYugabyteAreToldByWhatTheyReportAtConnect) {
  using dblock::detail::pg_engine_of;
  using dblock::detail::PgEngine;
  EXPECT_EQ(pg_engine_of("15.18 (Debian 15.18-0+deb12u1)", ""), PgEngine::postgresql);
  EXPECT_EQ(pg_engine_of("13.0.0", "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu)"), PgEngine::cockroachdb);
  EXPECT_EQ(pg_engine_of("11.2-YB-2.20.1.0-b0", ""), PgEngine::yugabytedb);
}
#endif

TEST(Uri, NoPasswordSurvivesInAnyMessageForHostileDsns) {
  struct Case {
    std::string uri, secret;
  };
  const std::vector<Case> cases{
      {"postgresql://u:Sec%zzRet77@127.0.0.1:5432/db", "Sec%zzRet77"},
      {"postgresql://u:pa/ss?wo@rd@127.0.0.1:5432/db", "pa/ss?wo@rd"},
      {"postgresql://u:p#ss:w%40rd@127.0.0.1/db?sslmode=disable", "p#ss:w%40rd"},
      {"postgresql://u@127.0.0.1/db?password=Top%zzSecret&prefix=x", "Top%zzSecret"},
      {"postgresql://u@127.0.0.1/db?sslpassword=KeyPhrase99", "KeyPhrase99"},
      {"postgresql://u@127.0.0.1/db?pass%77ord=Encoded77Key", "Encoded77Key"},
      {"postgresql://u@127.0.0.1/db?password=Sp%20ace99", "Sp ace99"},
      {"mysql://u:My%zzPw@127.0.0.1:3306/db", "My%zzPw"},
      {"postgresql://u:BadPool99@127.0.0.1/db?pool=zero", "BadPool99"},
      {"postgresql://u:Trunc99%4@127.0.0.1/db?prefix=%4", "Trunc99%4"},
  };
  for (auto& [uri, secret] : cases) {
    EXPECT_EQ(dblock::detail::redact_uri(uri).find(secret), std::string::npos)
        << uri << " -> " << dblock::detail::redact_uri(uri);
    std::string message = "driver said: \"" + uri + "\" and token \"" + secret + "\"";
    EXPECT_EQ(dblock::detail::redact_secrets(message, uri).find(secret), std::string::npos) << uri;
    try {
      (void)dblock::detail::resolve_store_uri(uri, {});
    } catch (const dblock::Error& e) {
      EXPECT_EQ(std::string(e.what()).find(secret), std::string::npos) << e.what();
    }
  }
}

namespace {

/// A migration session whose lock attempts fail with a transient error `transient_tries` times
/// (as MariaDB under Galera answered one: a lock-wait timeout while other schemas' DDL ran), then take it.
class FlakyLockSession final : public dblock::detail::MigrationSession {
 public:
  explicit FlakyLockSession(int transient_tries) : transient_tries_(transient_tries) {}
  bool try_lock() override {
    ++tries;
    if (tries <= transient_tries_) throw dblock::detail::TransientError("Lock wait timeout exceeded", "HY000");
    return true;
  }
  std::vector<dblock::detail::AppliedMigration> history() override { return {}; }
  void execute(const std::string&) override {}
  void record_applied(const dblock::detail::MigrationFile&, std::string_view, std::chrono::milliseconds) override {}
  void forget(int) override {}
  [[nodiscard]] bool one_transaction() const noexcept override { return false; }
  void finish() override {}
  int tries = 0;

 private:
  int transient_tries_;
};

}  // namespace

TEST(MigrationLock, ATransientErrorOnATryIsBusyNotAFailure) {
  FlakyLockSession session(2);
  EXPECT_NO_THROW(dblock::detail::take_migration_lock(session, std::chrono::seconds(30)));
  EXPECT_EQ(session.tries, 3);
}

// Galera answered one group release with 12 certification conflicts in a row on a loaded machine,
// and a release that gives up leaves its place taken until the lease ends: releases retry by time.
TEST(Retry, AReleaseRidesOutMoreConflictsInARowThanAnAcquisitionWouldAndStillEnds) {
  using dblock::detail::TransientError;
  int calls = 0;
  int retries = 0;
  auto value = dblock::detail::retry_transient_for(
      [&] {
        if (++calls <= 20) throw TransientError("Deadlock found when trying to get lock", "40001");
        return 7;
      },
      // A bound no machine reaches: 20 pauses take about a second, however slow the machine.
      [&] { ++retries; }, std::chrono::minutes(10));
  EXPECT_EQ(value, 7);
  EXPECT_EQ(calls, 21);
  EXPECT_EQ(retries, 20);

  // The bound is time: with none left, the first error is the answer (no repeat, whatever the count).
  calls = 0;
  EXPECT_THROW(dblock::detail::retry_transient_for(
                   [&]() -> int {
                     ++calls;
                     throw TransientError("Deadlock found when trying to get lock", "40001");
                   },
                   [] {}, std::chrono::milliseconds(0)),
               TransientError);
  EXPECT_EQ(calls, 1);
  static_assert(dblock::detail::kReleaseRetryTime >= std::chrono::seconds(5),
                "a release outlasts a burst of conflicts (12 in a row were seen on Galera)");
}

TEST(Retry, PausesGrowToTheirCapAndDifferByThreadSoConflictingSessionsDoNotRetryInStep) {
  for (int attempt = 1; attempt <= 10; ++attempt) {
    std::chrono::microseconds full = std::chrono::milliseconds(1 << std::min(attempt, 6));
    auto pause = dblock::detail::transient_pause(attempt);
    EXPECT_GE(pause, full / 2) << "attempt " << attempt;
    EXPECT_LE(pause, full) << "attempt " << attempt;
  }
  // Eight threads alive at once (a thread's id may be reused once it ended).
  constexpr int kThreads = 8;
  std::array<std::int64_t, kThreads> pauses{};
  std::latch all_alive(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        pauses[static_cast<std::size_t>(t)] = dblock::detail::transient_pause(6).count();
        all_alive.arrive_and_wait();
      });
  }
  EXPECT_GT(std::set<std::int64_t>(pauses.begin(), pauses.end()).size(), 1u)
      << "every thread would retry after the same pause";
}

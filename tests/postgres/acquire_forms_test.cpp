// PostgreSQL's acquisition exists in two forms: the statement the library runs (pg_sql.hpp, inline
// for less server CPU per grant) and migration 0005's acquire_held function, which applications in
// other languages call. The same steps through each must grant alike.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "support/admin.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;

namespace {

struct Outcome {
  std::int64_t count = 0;  // 0: not granted
  std::int64_t token = 0;
};

using Acquire = std::function<Outcome(const std::string& name, const std::string& owner, std::int64_t held_token,
                                      std::int64_t ttl_ms)>;
using LeaseLeft = std::function<std::chrono::milliseconds(const std::string& name)>;

// Runs the steps on `name` through `acquire` and describes each result in words that do not
// depend on the sequence's values: "refused", or the count and whether the token is the one
// held before or a new one above every token seen so far.
std::vector<std::string> walk(const std::string& name, dblock::test::Admin& admin, const Acquire& acquire,
                              const LeaseLeft& lease_left) {
  std::vector<std::string> described;
  std::int64_t highest = 0;
  std::int64_t a_token = 0;
  std::int64_t b_token = 0;
  auto step = [&](const std::string& owner, std::int64_t held, std::int64_t ttl_ms = 60'000) {
    auto outcome = acquire(name, owner, held, ttl_ms);
    if (outcome.count == 0) {
      described.push_back(owner + ": refused");
      return outcome;
    }
    std::string token = outcome.token == held && held != 0 ? "the held token"
                        : outcome.token > highest          ? "a new, higher token"
                                                  : fmt::format("token {} not above {}", outcome.token, highest);
    highest = std::max(highest, outcome.token);
    described.push_back(fmt::format("{}: count {}, {}", owner, outcome.count, token));
    return outcome;
  };
  a_token = step("A", 0).token;         // a fresh grant
  step("A", a_token);                   // re-entry with the held token
  step("B", 0);                         // another owner, lease live: refused
  a_token = step("A", 0).token;         // the owner without proof of holding: taken anew
  a_token = step("A", 0, 1'000).token;  // ... with a shorter lease, which keeps the longer one
  described.push_back(lease_left(name) > 50s ? "the longer lease kept" : "the lease shortened");
  admin.expire(name);            // A's lease ends
  b_token = step("B", 0).token;  // another owner takes over
  step("A", a_token);            // A's stale token re-enters nothing
  step("B", b_token);            // B re-enters
  admin.expire(name);
  step("B", b_token);  // an ended lease is not re-entered: granted anew
  return described;
}

TEST(AcquireForms, TheLibrarysStatementAndTheAcquireHeldFunctionGrantAlike) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  dblock::test::Installation installation("postgresql", server_dsn);
  auto& admin = installation.admin();
  auto& backend = dblock::detail::StoreParts::backend(*installation.store()).locks();
  Acquire library = [&](const std::string& name, const std::string& owner, std::int64_t held, std::int64_t ttl_ms) {
    auto grant = backend.try_acquire(name, owner, std::chrono::milliseconds(ttl_ms), held);
    return grant ? Outcome{grant->count, grant->token} : Outcome{};
  };
  Acquire function = [&](const std::string& name, const std::string& owner, std::int64_t held, std::int64_t ttl_ms) {
    auto rows = admin.query(
        fmt::format(R"(SELECT lock_count || ' ' || lock_token FROM "public"."{}acquire_held"('{}', '{}', {}, {}))",
                    installation.prefix(), name, owner, ttl_ms, held));
    if (rows.empty()) return Outcome{};
    auto space = rows.at(0).find(' ');
    return Outcome{std::stoll(rows.at(0).substr(0, space)), std::stoll(rows.at(0).substr(space + 1))};
  };
  LeaseLeft lease_left = [&](const std::string& name) { return backend.lease_left(name).value_or(0ms); };
  auto through_library = walk("forms/library", admin, library, lease_left);
  auto through_function = walk("forms/function", admin, function, lease_left);
  EXPECT_EQ(through_library, through_function);
  const std::vector<std::string> expected{"A: count 1, a new, higher token",
                                          "A: count 2, the held token",
                                          "B: refused",
                                          "A: count 1, a new, higher token",
                                          "A: count 1, a new, higher token",
                                          "the longer lease kept",
                                          "B: count 1, a new, higher token",
                                          "A: refused",
                                          "B: count 2, the held token",
                                          "B: count 1, a new, higher token"};
  EXPECT_EQ(through_library, expected);
}

}  // namespace

// The sidecar's status page in a real headless browser (Debian's chromium), its JSON twin, the
// guarded write action, and the lock-table gauges' cache, against a real PostgreSQL.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "observability/pg_fixture.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/sidecar.hpp"

using namespace std::chrono_literals;

namespace {

constexpr const char* kHostile = "<script>alert(1)</script>";

/// The sidecar as the status page's tests run it: reaping every second, the page's rows refreshed
/// every 100 ms.
class Sidecar : public dblock::test::Sidecar {
 public:
  Sidecar(const std::string& dsn, std::uint16_t port, std::vector<std::string> extra = {})
      : dblock::test::Sidecar(dsn, port, with_refresh(std::move(extra)), "127.0.0.1", "1s") {}

 private:
  static std::vector<std::string> with_refresh(std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--status-refresh", "100ms"});
    return extra;
  }
};

/// The DOM headless Chromium builds from `url` (scripts would have run by then).
std::string dump_dom(const std::string& url) {
  auto profile = fmt::format("/tmp/dblock-chromium-{}", getpid());
  return dblock::test::run_command({"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
                                    "--user-data-dir=" + profile, "--dump-dom", url},
                                   {.errors = "/dev/null"}, 60s)
      .output;
}

bool have_chromium() { return std::system("command -v chromium > /dev/null 2>&1") == 0; }

class StatusPage : public dblock::test::PgObservability {};

TEST_F(StatusPage, HeadlessChromiumShowsAHeldLockWithAHostileNameEscapedAndTheReleaseAfterwards) {
  if (!have_chromium()) {
    if (dblock::test::servers_required())
      FAIL() << "chromium is missing (tools/deps.sh installs it) but DBLOCK_REQUIRE_SERVERS=1";
    GTEST_SKIP() << "chromium is not installed (Debian: apt-get install chromium)";
  }
  dblock::LockManager locks(store_, {.default_ttl = 60s});
  auto hostile = locks.try_acquire(kHostile);
  ASSERT_TRUE(hostile);
  auto plain = locks.try_acquire("status/plain");
  ASSERT_TRUE(plain);
  Sidecar sidecar(dsn_, dblock::test::free_port());
  ASSERT_TRUE(sidecar.ready());

  auto url = fmt::format("http://127.0.0.1:{}/", sidecar.port());
  auto dom = dump_dom(url);
  ASSERT_NE(dom.find("<h1>dblock locks</h1>"), std::string::npos) << "the page did not load:\n" << dom;
  EXPECT_NE(dom.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos) << dom;
  EXPECT_EQ(dom.find(kHostile), std::string::npos) << "the name became markup:\n" << dom;
  EXPECT_NE(dom.find(fmt::format(">{}<", hostile->token())), std::string::npos) << "its token\n" << dom;
  EXPECT_NE(dom.find("status/plain"), std::string::npos) << dom;
  EXPECT_NE(dom.find("exclusive"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<b id=\"held\">2</b>"), std::string::npos) << dom;

  hostile->release();
  bool gone = dblock::test::eventually(
      [&] {
        dom = dump_dom(url);
        return dom.find("status/plain") != std::string::npos && dom.find("alert(1)") == std::string::npos;
      },
      15s);
  EXPECT_TRUE(gone) << "the page still shows the released lock:\n" << dom;
}

// The fair queue's waiters on the page, the JSON and the gauge: in arrival order with their places,
// a hostile owner escaped, and the places moving up once the first is granted.
TEST_F(StatusPage, HeadlessChromiumShowsTheFairQueuesWaitersInArrivalOrderEscaped) {
  if (!have_chromium()) {
    if (dblock::test::servers_required())
      FAIL() << "chromium is missing (tools/deps.sh installs it) but DBLOCK_REQUIRE_SERVERS=1";
    GTEST_SKIP() << "chromium is not installed (Debian: apt-get install chromium)";
  }
  const std::string name = "status/queued";
  dblock::LockManager fair(store_, {.default_ttl = 60s, .fair_queue = true});
  auto holder = fair.acquire(name, 5s);
  std::optional<dblock::Lock> granted;
  std::jthread first([&] { granted = fair.acquire(name, 60s); });
  ASSERT_TRUE(dblock::test::eventually([&] { return store_->waiters().size() == 1; }, 30s));
  auto& queue = dblock::detail::StoreParts::backend(*store_).queue().get();
  auto second = queue.take_turn(name, kHostile, 60s, 60s, 0);  // a waiter the test names: behind the first
  ASSERT_GT(second.seq, 0);
  Sidecar sidecar(dsn_, dblock::test::free_port());
  ASSERT_TRUE(sidecar.ready());

  auto url = fmt::format("http://127.0.0.1:{}/", sidecar.port());
  auto dom = dump_dom(url);
  ASSERT_NE(dom.find("id=\"waiters\""), std::string::npos) << "no waiters' table:\n" << dom;
  EXPECT_EQ(dom.find(kHostile), std::string::npos) << "the owner became markup:\n" << dom;
  auto first_place = dom.find("<td class=\"num position\">1</td>");
  auto second_place = dom.find("<td class=\"num position\">2</td><td class=\"owner\">&lt;script&gt;alert(1)");
  ASSERT_NE(first_place, std::string::npos) << dom;
  ASSERT_NE(second_place, std::string::npos) << "the hostile waiter is not second, escaped:\n" << dom;
  EXPECT_LT(first_place, second_place) << "arrival order";
  EXPECT_NE(dom.find("<b id=\"queued\">2</b>"), std::string::npos) << dom;
  auto json = sidecar.get("/status.json");
  EXPECT_NE(json.find(fmt::format("\"owner\":{},\"position\":2,", dblock::json_string(kHostile))), std::string::npos)
      << json;
  EXPECT_NE(sidecar.get("/metrics").find("dblock_queued_waiters 2\n"), std::string::npos);

  holder.release();  // hands the name to the first waiter: the hostile one moves up
  first.join();
  ASSERT_TRUE(granted.has_value());
  bool moved_up = dblock::test::eventually(
      [&] {
        dom = dump_dom(url);
        return dom.find("<td class=\"num position\">1</td><td class=\"owner\">&lt;script&gt;") != std::string::npos;
      },
      15s);
  EXPECT_TRUE(moved_up) << "the page does not show the second waiter first:\n" << dom;
  EXPECT_TRUE(queue.leave(name, kHostile, second.seq));
  granted->release();
}

TEST_F(StatusPage, TheJsonEndpointListsTheSameRowsAndWritesAreOffUnlessATokenIsGiven) {
  dblock::LockManager locks(store_, {.default_ttl = 60s});
  auto held = locks.try_acquire(kHostile);
  ASSERT_TRUE(held);
  Sidecar sidecar(dsn_, dblock::test::free_port());
  ASSERT_TRUE(sidecar.ready());
  auto json = sidecar.get("/status.json");
  EXPECT_NE(json.find(dblock::json_string(kHostile)), std::string::npos) << json;
  EXPECT_NE(json.find(fmt::format("\"token\":{}", held->token())), std::string::npos) << json;
  EXPECT_NE(json.find("\"kind\":\"exclusive\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"census\":{\"held\":1,"), std::string::npos) << json;
  auto page = sidecar.client().Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(page->body.find("<script"), std::string::npos) << "no script on the page at all";

  auto refused = sidecar.client().Post("/api/revoke?name=x", "", "text/plain");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << "write actions are off by default";
  EXPECT_FALSE(held->lost());
}

TEST_F(StatusPage, StatusRowsCapsTheListingToTheFirstNames) {
  dblock::LockManager locks(store_, {.default_ttl = 60s});
  auto c = locks.try_acquire("rows/c");
  auto a = locks.try_acquire("rows/a");
  auto b = locks.try_acquire("rows/b");
  ASSERT_TRUE(a && b && c);
  // The database sends only the first rows (doc/metrics.md measures it on a million).
  auto first = store_->locks(2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].name, "rows/a");
  EXPECT_EQ(first[1].name, "rows/b");
  Sidecar sidecar(dsn_, dblock::test::free_port(), {"--status-rows", "2"});
  ASSERT_TRUE(sidecar.ready());
  auto json = sidecar.get("/status.json");
  EXPECT_NE(json.find("\"truncated\":true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rows/a\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"rows/b\""), std::string::npos) << json;
  EXPECT_EQ(json.find("\"rows/c\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"held\":3"), std::string::npos) << "the census counts them all\n" << json;
  EXPECT_NE(sidecar.get("/").find("id=\"truncated\""), std::string::npos);
}

TEST_F(StatusPage, RevokeNeedsTheAdminToken) {
  auto token_file = fmt::format("/tmp/dblock-admin-token-{}", getpid());
  std::ofstream(token_file) << "0123456789abcdef-secret\n";
  dblock::LockManager locks(store_, {.default_ttl = 60s});
  auto held = locks.try_acquire("status/revoked");
  ASSERT_TRUE(held);
  Sidecar sidecar(dsn_, dblock::test::free_port(), {"--admin-token-file", token_file});
  ASSERT_TRUE(sidecar.ready());
  httplib::Headers wrong{{"Authorization", "Bearer 0123456789abcdef-secreX"}};
  auto denied = sidecar.client().Post("/api/revoke?name=status/revoked", wrong, "", "text/plain");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(store_->lock("status/revoked")->state, dblock::LockState::held);
  httplib::Headers right{{"Authorization", "Bearer 0123456789abcdef-secret"}};
  auto revoked = sidecar.client().Post("/api/revoke?name=status/revoked", right, "", "text/plain");
  ASSERT_TRUE(revoked);
  EXPECT_EQ(revoked->status, 200) << revoked->body;
  EXPECT_EQ(store_->lock("status/revoked")->state, dblock::LockState::revoked);
  std::remove(token_file.c_str());
}

TEST_F(StatusPage, AHoldersNoteIsShownEscapedOnThePageAndInTheJson) {
  dblock::LockManager locks(store_, {.default_ttl = 60s});
  auto held = locks.acquire("status/noted", 5s, {.note = "<script>alert(1)</script> by ci"});
  Sidecar sidecar(dsn_, dblock::test::free_port());
  ASSERT_TRUE(sidecar.ready());
  auto json = sidecar.get("/status.json");
  EXPECT_NE(json.find("\"note\":\"<script>alert(1)</script> by ci\""), std::string::npos) << json;
  auto page = sidecar.get("/");
  EXPECT_NE(page.find("<td class=\"note\">&lt;script&gt;alert(1)&lt;/script&gt; by ci</td>"), std::string::npos)
      << page;
  EXPECT_EQ(page.find("<script"), std::string::npos);
}

TEST_F(StatusPage, RequestReleaseNeedsTheAdminTokenAndTheHolderHearsIt) {
  auto token_file = fmt::format("/tmp/dblock-admin-token-ask-{}", getpid());
  std::ofstream(token_file) << "0123456789abcdef-secret\n";
  std::promise<std::int64_t> asked;
  dblock::LockManager locks(
      store_, {.default_ttl = 3s,
               .renew_interval = 200ms,
               .on_release_requested = [&](std::string_view, std::int64_t token) { asked.set_value(token); }});
  auto held = locks.try_acquire("status/asked");
  ASSERT_TRUE(held);
  Sidecar sidecar(dsn_, dblock::test::free_port(), {"--admin-token-file", token_file});
  ASSERT_TRUE(sidecar.ready());
  httplib::Headers wrong{{"Authorization", "Bearer 0123456789abcdef-secreX"}};
  auto denied = sidecar.client().Post("/api/request-release?name=status/asked", wrong, "", "text/plain");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  httplib::Headers right{{"Authorization", "Bearer 0123456789abcdef-secret"}};
  auto nobody = sidecar.client().Post("/api/request-release?name=status/nobody", right, "", "text/plain");
  ASSERT_TRUE(nobody);
  EXPECT_EQ(nobody->status, 404) << nobody->body;
  auto unnamed = sidecar.client().Post("/api/request-release", right, "", "text/plain");
  ASSERT_TRUE(unnamed);
  EXPECT_EQ(unnamed->status, 400);
  EXPECT_NE(unnamed->body.find("POST /api/request-release?name=NAME"), std::string::npos) << unnamed->body;
  auto told = sidecar.client().Post("/api/request-release?name=status/asked", right, "", "text/plain");
  ASSERT_TRUE(told);
  EXPECT_EQ(told->status, 200) << told->body;
  EXPECT_NE(told->body.find(fmt::format("\"token\":{}", held->token())), std::string::npos) << told->body;
  auto heard = asked.get_future();
  ASSERT_EQ(heard.wait_for(10s), std::future_status::ready) << "told at a renewal";
  EXPECT_EQ(heard.get(), held->token());
  EXPECT_EQ(store_->lock("status/asked")->state, dblock::LockState::held) << "asked, not revoked";
  std::remove(token_file.c_str());
}

TEST_F(StatusPage, LockTableGaugesAreReadAtMostOncePerCensusInterval) {
  dblock::LockManager locks(store_, {.default_ttl = 60s});
  auto first = locks.try_acquire("census/a");
  ASSERT_TRUE(first);
  Sidecar sidecar(dsn_, dblock::test::free_port(), {"--census-every", "1h"});
  ASSERT_TRUE(sidecar.ready());
  ASSERT_NE(sidecar.get("/metrics").find("dblock_locks_held 1\n"), std::string::npos);
  auto second = locks.try_acquire("census/b");
  ASSERT_TRUE(second);
  // Scrapes within the interval reuse the census: no scan of the table per scrape.
  for (int i = 0; i < 5; ++i)
    EXPECT_NE(sidecar.get("/metrics").find("dblock_locks_held 1\n"), std::string::npos) << "scrape " << i;
  EXPECT_NE(sidecar.get("/metrics").find("# TYPE dblock_census_duration_seconds gauge"), std::string::npos);
}

}  // namespace

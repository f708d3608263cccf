// The Prometheus adapter scraped over HTTP from a real prometheus::Exposer on loopback, with a
// real PostgreSQL behind the managers: every family, its type and the values the events imply.

#include <chrono>
#include <future>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <dblock/dblock.hpp>
#include <dblock/prometheus.hpp>

#include "observability/pg_fixture.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

class Scraped {
 public:
  explicit Scraped(std::string text) : text_(std::move(text)) {}
  /// The value of the series `name` whose labels include every one of `labels` ("k=\"v\"").
  [[nodiscard]] double value(const std::string& name, const std::vector<std::string>& labels = {}) const {
    std::istringstream lines(text_);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#') continue;
      auto series_end = line.find_first_of("{ ");
      if (line.compare(0, series_end, name) != 0 || series_end != name.size()) continue;
      auto labels_end = line.find(' ', line.find('}') == std::string::npos ? 0 : line.find('}'));
      auto series = line.substr(0, labels_end);
      bool all = true;
      for (auto& label : labels) all = all && series.find(label) != std::string::npos;
      if (all) return std::stod(line.substr(labels_end + 1));
    }
    return -1;  // absent
  }
  [[nodiscard]] bool has(const std::string& text) const { return text_.find(text) != std::string::npos; }
  [[nodiscard]] const std::string& text() const { return text_; }

 private:
  std::string text_;
};

class PrometheusAdapter : public dblock::test::PgObservability {
 protected:
  void SetUp() override {
    PgObservability::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    registry_ = std::make_shared<prometheus::Registry>();
    exposer_ = std::make_unique<prometheus::Exposer>("127.0.0.1:0");
    exposer_->RegisterCollectable(registry_);
    auto ports = exposer_->GetListeningPorts();
    ASSERT_FALSE(ports.empty());
    port_ = ports.front();
  }
  Scraped scrape() {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(5, 0);
    auto response = client.Get("/metrics");
    EXPECT_TRUE(response && response->status == 200);
    return Scraped(response ? response->body : "");
  }

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

TEST_F(PrometheusAdapter, AScrapeHasEveryFamilyWithTheValuesTheLocksImply) {
  dblock::PrometheusMetrics metrics(*registry_, {.labels = {{"service", "obs"}}});
  dblock::LockManager locks(store_, {.default_ttl = 600ms, .on_event = metrics.handler()});
  dblock::LockManager other(store_);

  auto first = scrape();
  for (const char* type :
       {"# TYPE dblock_acquire_wait_seconds histogram", "# TYPE dblock_lock_hold_seconds histogram",
        "# TYPE dblock_held_locks gauge", "# TYPE dblock_waiting_acquires gauge",
        "# TYPE dblock_locks_lost_total counter", "# TYPE dblock_acquire_contended_total counter",
        "# TYPE dblock_renewal_duration_seconds histogram", "# TYPE dblock_statement_retries_total counter"})
    EXPECT_TRUE(first.has(type)) << type << "\n" << first.text();
  EXPECT_EQ(first.value("dblock_held_locks", {"service=\"obs\""}), 0);

  auto kept = locks.acquire("prom/kept", 1s);
  auto reentered = locks.acquire("prom/kept", 1s);
  EXPECT_EQ(scrape().value("dblock_held_locks"), 1) << "a re-entry is the same lock";

  // A wait that times out, and one that is granted when the other owner lets go.
  auto busy = other.try_acquire("prom/busy");
  ASSERT_TRUE(busy);
  EXPECT_THROW((void)locks.acquire("prom/busy", 100ms), dblock::Timeout);
  auto waiter = std::async(std::launch::async, [&] { return locks.acquire("prom/busy", 10s); });
  ASSERT_TRUE(eventually([&] { return scrape().value("dblock_waiting_acquires") == 1; })) << scrape().text();
  busy->release();
  auto granted = waiter.get();
  auto after_wait = scrape();
  EXPECT_EQ(after_wait.value("dblock_waiting_acquires"), 0);
  EXPECT_EQ(after_wait.value("dblock_held_locks"), 2);
  EXPECT_EQ(after_wait.value("dblock_acquire_wait_seconds_count", {"outcome=\"timeout\""}), 1);
  EXPECT_GE(after_wait.value("dblock_acquire_wait_seconds_sum", {"outcome=\"timeout\""}), 0.1);
  EXPECT_EQ(after_wait.value("dblock_acquire_wait_seconds_count", {"outcome=\"acquired\""}), 3);
  EXPECT_EQ(after_wait.value("dblock_acquire_wait_seconds_bucket", {"outcome=\"acquired\"", "le=\"+Inf\""}), 3);
  EXPECT_GE(after_wait.value("dblock_acquire_contended_total"), 2);

  // A lost lock: deleted behind its holder's back, found at the next renewal.
  auto doomed = locks.acquire("prom/doomed", 1s);
  ASSERT_TRUE(store_->force_release("prom/doomed"));
  ASSERT_TRUE(eventually([&] { return scrape().value("dblock_locks_lost_total") == 1; })) << scrape().text();
  EXPECT_THROW(doomed.release(), dblock::LockLost);
  reentered.release();
  kept.release();
  granted.release();
  auto end = scrape();
  EXPECT_EQ(end.value("dblock_locks_lost_total"), 1) << "a loss counts once, however it is found";
  EXPECT_EQ(end.value("dblock_held_locks"), 0) << end.text();
  EXPECT_EQ(end.value("dblock_lock_hold_seconds_count", {"end=\"released\""}), 2);
  EXPECT_EQ(end.value("dblock_lock_hold_seconds_count", {"end=\"lost\""}), 1);
  EXPECT_GE(end.value("dblock_renewal_duration_seconds_count", {"outcome=\"renewed\""}), 1);
  EXPECT_GT(end.value("dblock_renewal_duration_seconds_sum", {"outcome=\"renewed\""}), 0);
  EXPECT_EQ(end.value("dblock_statement_retries_total", {"service=\"obs\""}), 0);
  EXPECT_FALSE(end.has("prom/")) << "lock names are not labels by default\n" << end.text();
}

TEST_F(PrometheusAdapter, ALockLabelMapsNamesToABoundedSet) {
  dblock::PrometheusMetrics metrics(
      *registry_, {.lock_label = [](std::string_view name) { return std::string(name.substr(0, name.find('/'))); }});
  dblock::LockManager locks(store_, {.on_event = metrics.handler()});
  for (int i = 0; i < 5; ++i) locks.acquire(fmt::format("orders/{}", i), 1s).release();
  auto held = locks.acquire("jobs/nightly", 1s);
  auto scraped = scrape();
  EXPECT_EQ(scraped.value("dblock_acquire_wait_seconds_count", {"lock=\"orders\"", "outcome=\"acquired\""}), 5);
  EXPECT_EQ(scraped.value("dblock_held_locks", {"lock=\"jobs\""}), 1);
  EXPECT_EQ(scraped.value("dblock_held_locks", {"lock=\"orders\""}), 0);
  EXPECT_FALSE(scraped.has("orders/")) << scraped.text();
}

}  // namespace

#include "dblock/reaper_command.hpp"

#include <signal.h>

#include <algorithm>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <dblock/dblock.hpp>

#include "dblock/exit_codes.hpp"
#include "dblock/listen_address.hpp"
#include "dblock/metrics.hpp"
#include "dblock/reaper_http.hpp"
#include "dblock/status_source.hpp"

namespace dblock::cli {

namespace {

/// Waits up to `timeout` for SIGTERM/SIGINT/SIGHUP; returns true when one arrived.
bool wait_for_stop_signal(std::chrono::milliseconds timeout) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec slice{static_cast<time_t>(seconds.count()),
                 static_cast<long>(std::chrono::nanoseconds(timeout - seconds).count())};
  siginfo_t info{};
  int got = sigtimedwait(&signals, &info, &slice);
  return got == SIGTERM || got == SIGINT || got == SIGHUP;
}

struct OpenedStore {
  std::shared_ptr<Store> store;  // empty: the sidecar ends with exit_code
  int exit_code = 0;
};

/// Opens the store, retrying with backoff while the database is unreachable, until a stop signal
/// (exit 0); with --once, a database unreachable ends the sidecar at once.
OpenedStore open_until_reached(const ReaperRequest& request, ReaperMetrics& metrics,
                               const std::shared_ptr<spdlog::logger>& logger) {
  auto delay = std::chrono::milliseconds(200);
  while (true) {
    try {
      return {Store::open(request.dsn, StoreOptions{.logger = logger})};
    } catch (const ConnectionError& e) {
      metrics.record_failure(e.what());
      if (request.once) {
        logger->error("database unreachable: {}", e.what());
        return {nullptr, kUnavailable};
      }
      logger->warn("database unreachable, retrying in {}ms: {}", delay.count(), e.what());
      if (wait_for_stop_signal(delay)) return {nullptr, 0};
      delay = std::min(delay * 2, request.interval);
    }
  }
}

}  // namespace

int run_reaper(const ReaperRequest& request, const std::shared_ptr<spdlog::logger>& logger) {
  ReaperMetrics metrics;
  std::mutex store_mutex;
  std::shared_ptr<Store> store;  // set once the database answered
  auto current_store = [&] {
    std::lock_guard lock(store_mutex);
    return store;
  };
  std::string admin_token;
  if (!request.admin_token_file.empty()) admin_token = read_admin_token(request.admin_token_file);
  StatusSource status(current_store, request.census_every, request.status_refresh, request.status_rows);

  // Declared after what its handlers read, so that however this function ends (a DSN Store::open
  // refuses throws) the listener stops first: a sidecar must not hang answering "ok".
  std::optional<SidecarHttp> http;
  if (!request.listen.empty() && !request.once) {
    try {
      http.emplace(request, metrics, status, current_store, admin_token, logger);
    } catch (const ListenError& e) {
      logger->error("cannot listen on {}: {}", request.listen, e.what());
      return kOsError;
    }
  }

  auto opened = open_until_reached(request, metrics, logger);
  if (!opened.store) return opened.exit_code;
  {
    std::lock_guard lock(store_mutex);
    store = opened.store;
  }
  Reaper reaper(
      opened.store,
      ReaperOptions{.interval = request.interval, .batch_size = request.batch, .on_cycle = [&](const ReapCycle& cycle) {
                      metrics.record(cycle);
                      // The cached census still counts the rows just deleted.
                      if (cycle.rows > 0) status.invalidate();
                    }});
  if (request.once) {
    auto cycle = reaper.run_once();
    fmt::print("reaped {} expired lock(s) in {} batch(es)\n", cycle.rows, cycle.batches);
    if (!cycle.ok) logger->error("reaper cycle failed: {}", cycle.error);
    return cycle.ok ? 0 : kSoftware;
  }
  reaper.start();
  logger->info("reaper running: every {}ms, batches of {}", request.interval.count(), request.batch);
  while (!wait_for_stop_signal(std::chrono::milliseconds(1000))) {
  }
  logger->info("stopping");
  reaper.stop();  // a cycle in progress ends after its current batch
  return 0;
}

}  // namespace dblock::cli

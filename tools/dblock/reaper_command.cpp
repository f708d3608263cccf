#include "dblock/reaper_command.hpp"

#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <charconv>
#include <optional>
#include <thread>

#include <dblock/dblock.hpp>
#include <fmt/format.h>
#include <httplib.h>

#include "dblock/exit_codes.hpp"
#include "dblock/metrics.hpp"

namespace dblock::cli {

namespace {

struct ListenAddress {
  std::string host;
  int port = 0;
};

ListenAddress parse_listen(const std::string& text) {
  auto colon = text.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc() || port < 0 ||
      port > 65535)
    throw InvalidArgument(fmt::format("--listen '{}' must be HOST:PORT, e.g. 127.0.0.1:9464", text));
  return {text.substr(0, colon), port};
}

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

}  // namespace

int run_reaper(const ReaperRequest& request, const std::shared_ptr<spdlog::logger>& logger) {
  ReaperMetrics metrics;
  std::mutex store_mutex;
  std::shared_ptr<Store> store;  // set once the database answered
  auto current_store = [&] {
    std::lock_guard lock(store_mutex);
    return store;
  };

  httplib::Server server;
  std::jthread http;
  if (!request.listen.empty() && !request.once) {
    auto address = parse_listen(request.listen);
    server.Get("/metrics", [&](const httplib::Request&, httplib::Response& response) {
      std::optional<LockCensus> census;
      if (auto open = current_store()) {
        try {
          census = open->census();
        } catch (const std::exception& e) {
          logger->debug("census for /metrics failed: {}", e.what());
        }
      }
      response.set_content(metrics.render(census), "text/plain; version=0.0.4; charset=utf-8");
    });
    server.Get("/healthz", [&](const httplib::Request&, httplib::Response& response) {
      auto failures = metrics.consecutive_failures();
      if (failures >= request.unhealthy_after) {
        response.status = 503;
        response.set_content(fmt::format("unhealthy: {} failed cycles in a row: {}\n", failures, metrics.last_error()),
                             "text/plain");
      } else {
        response.set_content("ok\n", "text/plain");
      }
    });
    // SO_REUSEADDR only (a restart binds over connections in TIME_WAIT); httplib's default
    // SO_REUSEPORT would let a second reaper share the port and split the scrapes.
    server.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    errno = 0;
    if (!server.bind_to_port(address.host, address.port)) {
      logger->error("cannot listen on {}: {}", request.listen,
                    errno != 0 ? std::strerror(errno) : "the address is in use or not available");
      return kOsError;
    }
    http = std::jthread([&server] { server.listen_after_bind(); });
    logger->info("serving /metrics and /healthz on {}", request.listen);
  }
  auto stop_http = [&] {
    if (http.joinable()) {
      server.stop();
      http.join();
    }
  };

  // Open the store, retrying with backoff while the database is unreachable.
  auto delay = std::chrono::milliseconds(200);
  while (!current_store()) {
    try {
      auto opened = Store::open(request.dsn, StoreOptions{.logger = logger});
      std::lock_guard lock(store_mutex);
      store = std::move(opened);
    } catch (const ConnectionError& e) {
      metrics.record_failure(e.what());
      if (request.once) {
        logger->error("database unreachable: {}", e.what());
        return kUnavailable;
      }
      logger->warn("database unreachable, retrying in {}ms: {}", delay.count(), e.what());
      if (wait_for_stop_signal(delay)) {
        stop_http();
        return 0;
      }
      delay = std::min(delay * 2, request.interval);
    }
  }

  Reaper reaper(current_store(), ReaperOptions{.interval = request.interval, .batch_size = request.batch,
                                               .on_cycle = [&](const ReapCycle& cycle) { metrics.record(cycle); }});
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
  stop_http();
  return 0;
}

}  // namespace dblock::cli

#include "dblock/reaper_command.hpp"

#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <algorithm>
#include <charconv>
#include <optional>
#include <thread>

#include <dblock/dblock.hpp>
#include <fmt/format.h>
#include <httplib.h>

#include "dblock/exit_codes.hpp"
#include "dblock/metrics.hpp"
#include "dblock/status_page.hpp"
#include "dblock/status_source.hpp"

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

/// The admin token from its file (trailing newline dropped). @throws InvalidArgument when the
/// file cannot be read or holds fewer than 16 characters (a guessable token protects nothing).
std::string read_admin_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("--admin-token-file {}: cannot read it", path));
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.size() < 16)
    throw InvalidArgument(fmt::format("--admin-token-file {}: the token must have at least 16 characters", path));
  return token;
}

/// Compares in a time that does not depend on where the first difference is.
bool same_secret(std::string_view given, std::string_view secret) {
  if (given.size() != secret.size()) return false;  // the length is not the secret
  unsigned char difference = 0;
  for (std::size_t i = 0; i < given.size(); ++i) difference |= static_cast<unsigned char>(given[i] ^ secret[i]);
  return difference == 0;
}

/// Headers of every page and JSON answer: nothing runs, nothing is loaded from elsewhere, nothing cached.
void set_page_headers(httplib::Response& response) {
  response.set_header("Content-Security-Policy",
                      "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'");
  response.set_header("X-Content-Type-Options", "nosniff");
  response.set_header("Cache-Control", "no-store");
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
  auto store_label = [&] {
    auto open = current_store();
    return open ? open->redacted_uri() : std::string("(not connected yet)");
  };

  httplib::Server server;
  std::jthread http;
  if (!request.listen.empty() && !request.once) {
    auto address = parse_listen(request.listen);
    server.Get("/metrics", [&](const httplib::Request&, httplib::Response& response) {
      // The census scans the lock table: cached for --census-every, whatever the scrape rate.
      auto census = status.census();
      auto text = metrics.render(census && metrics.consecutive_failures() == 0 ? census : std::nullopt);
      text += fmt::format(
          "# HELP dblock_census_duration_seconds How long the last lock-table census took.\n"
          "# TYPE dblock_census_duration_seconds gauge\ndblock_census_duration_seconds {}\n",
          static_cast<double>(status.last_census_duration().count()) / 1e6);
      response.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });
    auto page = [&](const httplib::Request&, httplib::Response& response) {
      set_page_headers(response);
      auto refresh = static_cast<int>(std::max<std::int64_t>(1, request.status_refresh.count() / 1000));
      response.set_content(render_status_html(status.snapshot(), store_label(), refresh), "text/html; charset=utf-8");
    };
    // Lock names and owners (host names, pids) are for operators: a listener reachable from
    // elsewhere (0.0.0.0 for a scraper) shows them only when asked to.
    auto& host = address.host;
    bool loopback = host == "localhost" || host.starts_with("127.") || host == "::1" || host == "[::1]";
    if (loopback || request.status_public) {
      server.Get("/", page);
      server.Get("/status", page);
      server.Get("/status.json", [&](const httplib::Request&, httplib::Response& response) {
        set_page_headers(response);
        response.set_content(render_status_json(status.snapshot(), store_label()), "application/json");
      });
    }
    // The one write action: off unless an admin token was given, and then only with it.
    server.Post("/api/revoke", [&](const httplib::Request& http_request, httplib::Response& response) {
      set_page_headers(response);
      if (admin_token.empty()) {
        response.status = 403;
        response.set_content("{\"error\":\"write actions are off (start the reaper with --admin-token-file)\"}\n",
                             "application/json");
        return;
      }
      auto authorization = http_request.get_header_value("Authorization");
      constexpr std::string_view kBearer = "Bearer ";
      if (!authorization.starts_with(kBearer) ||
          !same_secret(std::string_view(authorization).substr(kBearer.size()), admin_token)) {
        response.status = 401;
        response.set_header("WWW-Authenticate", "Bearer");
        response.set_content("{\"error\":\"a valid bearer token is required\"}\n", "application/json");
        return;
      }
      auto name = http_request.get_param_value("name");
      auto open = current_store();
      try {
        if (!open) throw ConnectionError("the database has not been reached yet");
        auto revoked = open->revoke(name);
        status.invalidate();
        logger->warn("revoked lock {} through /api/revoke", json_string(name));
        response.status = revoked ? 200 : 404;
        response.set_content(revoked ? fmt::format("{{\"revoked\":{},\"token\":{},\"free_in_ms\":{}}}\n",
                                                   json_string(name), revoked->token, revoked->remaining.count())
                                     : std::string("{\"error\":\"no live lock of that name\"}\n"),
                             "application/json");
      } catch (const InvalidArgument& e) {
        response.status = 400;
        response.set_content(fmt::format("{{\"error\":{}}}\n", json_string(e.what())), "application/json");
      } catch (const std::exception& e) {
        response.status = 503;
        response.set_content(fmt::format("{{\"error\":{}}}\n", json_string(e.what())), "application/json");
      }
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
    logger->info("serving /metrics, /healthz and the status page (/, /status.json) on {}{}", request.listen,
                 admin_token.empty() ? "" : "; POST /api/revoke with the admin token");
  }
  auto stop_http = [&] {
    if (!http.joinable()) return;
    // httplib's stop() does nothing until listen_after_bind() runs, which its thread starts at
    // once: an early stop (a DSN refused right away) waits for that, bounded.
    for (int waited_ms = 0; !server.is_running() && waited_ms < 5000; ++waited_ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    server.stop();
    http.join();
  };
  // However this function ends (a DSN Store::open refuses throws), the listener stops first:
  // ~jthread would otherwise wait for a server nobody stops, a sidecar that hangs answering "ok".
  struct StopsHttp {
    decltype(stop_http)& stop;
    ~StopsHttp() { stop(); }
  } stops_http{stop_http};

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

  Reaper reaper(
      current_store(),
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
  stop_http();
  return 0;
}

}  // namespace dblock::cli

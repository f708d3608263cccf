#include "dblock/reaper_command.hpp"

#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <algorithm>
#include <optional>
#include <thread>

#include <dblock/dblock.hpp>
#include <fmt/format.h>
#include <httplib.h>

#include "dblock/exit_codes.hpp"
#include "dblock/listen_address.hpp"
#include "dblock/metrics.hpp"
#include "dblock/status_page.hpp"
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

/// Binds `server` to the first address `address.host` names that can be bound, as httplib would, but
/// handing it each address's numeric spelling: the address returned, which decides what the listener
/// serves (is_loopback), is then the one bound, whatever the name resolves to a moment later.
/// @throws ListenError naming each address tried and why it could not be bound.
ListenCandidate bind_listener(httplib::Server& server, const ListenAddress& address) {
  std::string failures;
  for (auto& candidate : resolve_listen_host(address.host)) {
    errno = 0;
    if (server.bind_to_port(candidate.numeric, address.port)) return candidate;
    failures += fmt::format("{}{}: {}", failures.empty() ? "" : "; ", candidate.numeric,
                            errno != 0 ? std::strerror(errno) : "cannot be bound");
  }
  throw ListenError(failures);
}

/// Why the sidecar answers `status` to `request` when no handler said so itself: httplib's own
/// answers (a malformed request, an unknown path) carry no body.
std::string refusal_reason(const httplib::Request& request, int status, bool status_page_served) {
  switch (status) {
    case 400:
      return "the request could not be read: malformed, or a body was announced (Content-Length, Transfer-Encoding) "
             "and not sent";
    case 404:
      if (!status_page_served && request.method == "GET" &&
          (request.path == "/" || request.path == "/status" || request.path == "/status.json"))
        return "the status page is served on a loopback --listen address only, unless the reaper runs with "
               "--status-public";
      return "no such endpoint: this sidecar serves GET /metrics, /healthz, /, /status, /status.json and "
             "POST /api/revoke?name=NAME";
    case 413:
      return "the request body is too large";
    case 414:
      return "the request URI is too long";
    case 416:
      return "the requested range cannot be served";
    default:
      return fmt::format("the request was refused ({})", status);
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
  auto store_label = [&] {
    auto open = current_store();
    return open ? open->redacted_uri() : std::string("(not connected yet)");
  };

  httplib::Server server;
  std::jthread http;
  if (!request.listen.empty() && !request.once) {
    auto address = parse_listen(request.listen);
    // SO_REUSEADDR only (a restart binds over connections in TIME_WAIT); httplib's default
    // SO_REUSEPORT would let a second reaper share the port and split the scrapes.
    server.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    std::optional<ListenCandidate> bound;
    try {
      bound = bind_listener(server, address);
    } catch (const ListenError& e) {
      logger->error("cannot listen on {}: {}", request.listen, e.what());
      return kOsError;
    }
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
    // elsewhere (0.0.0.0 for a scraper) shows them only when asked to. Judged by the address bound,
    // not by how --listen spells it: a name such as 127.example.com may resolve to any address.
    bool status_page_served = is_loopback(bound->address) || request.status_public;
    if (status_page_served) {
      server.Get("/", page);
      server.Get("/status", page);
      server.Get("/status.json", [&](const httplib::Request&, httplib::Response& response) {
        set_page_headers(response);
        response.set_content(render_status_json(status.snapshot(), store_label()), "application/json");
      });
    }
    // The one write action: off unless an admin token was given, and then only with it.
    auto revoke = [&](const httplib::Request& http_request, httplib::Response& response) {
      set_page_headers(response);
      auto refuse = [&response](int code, std::string_view reason) {
        response.status = code;
        response.set_content(fmt::format("{{\"error\":{}}}\n", json_string(reason)), "application/json");
      };
      if (admin_token.empty()) return refuse(403, "write actions are off (start the reaper with --admin-token-file)");
      auto authorization = http_request.get_header_value("Authorization");
      constexpr std::string_view kBearer = "Bearer ";
      if (!authorization.starts_with(kBearer) ||
          !same_secret(std::string_view(authorization).substr(kBearer.size()), admin_token)) {
        response.set_header("WWW-Authenticate", "Bearer");
        return refuse(401, "a valid bearer token is required");
      }
      auto name = http_request.get_param_value("name");
      if (name.empty()) return refuse(400, "the name parameter is missing: POST /api/revoke?name=NAME");
      auto open = current_store();
      try {
        if (!open) throw ConnectionError("the database has not been reached yet");
        auto revoked = open->revoke(name);
        status.invalidate();
        if (!revoked) return refuse(404, "no live lock of that name");
        logger->warn("revoked lock {} through /api/revoke", json_string(name));
        response.set_content(fmt::format("{{\"revoked\":{},\"token\":{},\"free_in_ms\":{}}}\n", json_string(name),
                                         revoked->token, revoked->remaining.count()),
                             "application/json");
      } catch (const InvalidArgument& e) {
        refuse(400, e.what());
      } catch (const std::exception& e) {
        refuse(503, e.what());
      }
    };
    server.Post("/api/revoke", revoke);
    // RFC 9112 section 6.3: a request with neither Content-Length nor Transfer-Encoding has no body,
    // and `curl -X POST URL` sends one so. httplib 0.11 reads such a body until its read timeout and
    // then answers 400 without calling any handler, so these requests are answered before it reads.
    // `revoke` by value: it is local to this block, and the server's threads outlive the block.
    server.set_pre_routing_handler([revoke](const httplib::Request& http_request, httplib::Response& response) {
      if (http_request.method != "POST" || http_request.has_header("Content-Length") ||
          http_request.has_header("Transfer-Encoding"))
        return httplib::Server::HandlerResponse::Unhandled;
      if (http_request.path == "/api/revoke")
        revoke(http_request, response);
      else
        response.status = 404;  // the error handler says why
      return httplib::Server::HandlerResponse::Handled;
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
    // Every error answer says why, httplib's own included (a malformed request, an unknown path).
    server.set_error_handler(httplib::Server::HandlerWithResponse(
        [status_page_served](const httplib::Request& http_request, httplib::Response& response) {
          if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          auto reason = refusal_reason(http_request, response.status, status_page_served);
          if (http_request.path.starts_with("/api/"))
            response.set_content(fmt::format("{{\"error\":{}}}\n", json_string(reason)), "application/json");
          else
            response.set_content(reason + "\n", "text/plain; charset=utf-8");
          return httplib::Server::HandlerResponse::Handled;
        }));
    http = std::jthread([&server] { server.listen_after_bind(); });
    auto bound_endpoint = format_endpoint(bound->numeric, address.port);
    logger->info("serving /metrics, /healthz{} on {}{}{}", status_page_served ? " and the status page" : "",
                 request.listen, bound_endpoint == request.listen ? "" : fmt::format(" (bound to {})", bound_endpoint),
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

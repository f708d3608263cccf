#include "dblock/reaper_http.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <dblock/errors.hpp>
#include <dblock/text.hpp>

#include "dblock/listen_address.hpp"
#include "dblock/status_page.hpp"

namespace dblock::cli {

namespace {

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
             "POST /api/revoke?name=NAME and /api/request-release?name=NAME";
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

void refuse(httplib::Response& response, int code, std::string_view reason) {
  response.status = code;
  response.set_content(fmt::format("{{\"error\":{}}}\n", json_string(reason)), "application/json");
}

}  // namespace

std::string read_admin_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("--admin-token-file {}: cannot read it", path));
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.size() < 16)
    throw InvalidArgument(fmt::format("--admin-token-file {}: the token must have at least 16 characters", path));
  return token;
}

SidecarHttp::SidecarHttp(const ReaperRequest& request, ReaperMetrics& metrics, StatusSource& status,
                         StoreGetter current_store, std::string admin_token, std::shared_ptr<spdlog::logger> logger)
    : request_(request),
      metrics_(metrics),
      status_(status),
      current_store_(std::move(current_store)),
      admin_token_(std::move(admin_token)),
      logger_(std::move(logger)) {
  auto address = parse_listen(request.listen);
  // SO_REUSEADDR only (a restart binds over connections in TIME_WAIT); httplib's default
  // SO_REUSEPORT would let a second reaper share the port and split the scrapes.
  server_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  auto bound = bind_listener(server_, address);
  // Lock names and owners (host names, pids) are for operators: a listener reachable from
  // elsewhere (0.0.0.0 for a scraper) shows them only when asked to. Judged by the address bound,
  // not by how --listen spells it: a name such as 127.example.com may resolve to any address.
  status_page_served_ = is_loopback(bound.address) || request.status_public;
  serve_metrics_and_health();
  if (status_page_served_) serve_status_pages();
  serve_write_actions();
  answer_errors();
  thread_ = std::jthread([this] { server_.listen_after_bind(); });
  auto bound_endpoint = format_endpoint(bound.numeric, address.port);
  logger_->info("serving /metrics, /healthz{} on {}{}{}", status_page_served_ ? " and the status page" : "",
                request.listen, bound_endpoint == request.listen ? "" : fmt::format(" (bound to {})", bound_endpoint),
                admin_token_.empty() ? "" : "; POST /api/revoke and /api/request-release with the admin token");
}

SidecarHttp::~SidecarHttp() {
  // httplib's stop() does nothing until listen_after_bind() runs, which its thread starts at
  // once: an early stop (a DSN refused right away) waits for that, bounded.
  for (int waited_ms = 0; !server_.is_running() && waited_ms < 5000; ++waited_ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_.stop();
  thread_.join();
}

std::string SidecarHttp::store_label() const {
  auto open = current_store_();
  return open ? open->redacted_uri() : std::string("(not connected yet)");
}

void SidecarHttp::serve_metrics_and_health() {
  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    // The census scans the lock table: cached for --census-every, whatever the scrape rate.
    auto census = status_.census();
    auto text = metrics_.render(census && metrics_.consecutive_failures() == 0 ? census : std::nullopt);
    text += fmt::format(
        "# HELP dblock_census_duration_seconds How long the last lock-table census took.\n"
        "# TYPE dblock_census_duration_seconds gauge\ndblock_census_duration_seconds {}\n",
        static_cast<double>(status_.last_census_duration().count()) / 1e6);
    response.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  server_.Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
    auto failures = metrics_.consecutive_failures();
    if (failures >= request_.unhealthy_after) {
      response.status = 503;
      response.set_content(fmt::format("unhealthy: {} failed cycles in a row: {}\n", failures, metrics_.last_error()),
                           "text/plain");
    } else {
      response.set_content("ok\n", "text/plain");
    }
  });
}

void SidecarHttp::serve_status_pages() {
  auto page = [this](const httplib::Request&, httplib::Response& response) {
    set_page_headers(response);
    auto refresh = static_cast<int>(std::max<std::int64_t>(1, request_.status_refresh.count() / 1000));
    response.set_content(render_status_html(status_.snapshot(), store_label(), refresh), "text/html; charset=utf-8");
  };
  server_.Get("/", page);
  server_.Get("/status", page);
  server_.Get("/status.json", [this](const httplib::Request&, httplib::Response& response) {
    set_page_headers(response);
    response.set_content(render_status_json(status_.snapshot(), store_label()), "application/json");
  });
}

namespace {

/// An answer of a write action: the row's JSON, or empty when no live lock of that name was there.
std::string revoke_lock(Store& store, const std::string& name, spdlog::logger& logger) {
  auto revoked = store.revoke(name);
  if (!revoked) return {};
  logger.warn("revoked lock {} through /api/revoke", json_string(name));
  return fmt::format("{{\"revoked\":{},\"token\":{},\"free_in_ms\":{}}}\n", json_string(name), revoked->token,
                     revoked->remaining.count());
}

std::string ask_holder(Store& store, const std::string& name, spdlog::logger& logger) {
  auto asked = store.request_release(name);
  if (!asked) return {};
  logger.info("asked the holder of lock {} to let go through /api/request-release", json_string(name));
  return fmt::format("{{\"asked\":{},\"owner\":{},\"token\":{},\"lease_left_ms\":{}}}\n", json_string(name),
                     json_string(asked->owner), asked->token, asked->remaining.count());
}

}  // namespace

// The write actions: off unless an admin token was given, and then only with it.
void SidecarHttp::write_action(const httplib::Request& http_request, httplib::Response& response, WriteAction action) {
  set_page_headers(response);
  if (admin_token_.empty())
    return refuse(response, 403, "write actions are off (start the reaper with --admin-token-file)");
  auto authorization = http_request.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (!authorization.starts_with(kBearer) ||
      !same_secret(std::string_view(authorization).substr(kBearer.size()), admin_token_)) {
    response.set_header("WWW-Authenticate", "Bearer");
    return refuse(response, 401, "a valid bearer token is required");
  }
  auto name = http_request.get_param_value("name");
  if (name.empty())
    return refuse(response, 400, fmt::format("the name parameter is missing: POST {}?name=NAME", http_request.path));
  auto open = current_store_();
  try {
    if (!open) throw ConnectionError("the database has not been reached yet");
    auto answer = action(*open, name, *logger_);
    status_.invalidate();
    if (answer.empty()) return refuse(response, 404, "no live lock of that name");
    response.set_content(answer, "application/json");
  } catch (const InvalidArgument& e) {
    refuse(response, 400, e.what());
  } catch (const std::exception& e) {
    refuse(response, 503, e.what());
  }
}

void SidecarHttp::serve_write_actions() {
  const std::map<std::string, WriteAction, std::less<>> actions{{"/api/revoke", revoke_lock},
                                                                {"/api/request-release", ask_holder}};
  for (const auto& [path, action] : actions)
    server_.Post(path, [this, action](const httplib::Request& http_request, httplib::Response& response) {
      write_action(http_request, response, action);
    });
  // RFC 9112 section 6.3: a request with neither Content-Length nor Transfer-Encoding has no body,
  // and `curl -X POST URL` sends one so. httplib 0.11 reads such a body until its read timeout and
  // then answers 400 without calling any handler, so these requests are answered before it reads.
  server_.set_pre_routing_handler([this, actions](const httplib::Request& http_request, httplib::Response& response) {
    if (http_request.method != "POST" || http_request.has_header("Content-Length") ||
        http_request.has_header("Transfer-Encoding"))
      return httplib::Server::HandlerResponse::Unhandled;
    if (auto action = actions.find(http_request.path); action != actions.end())
      write_action(http_request, response, action->second);
    else
      response.status = 404;  // the error handler says why
    return httplib::Server::HandlerResponse::Handled;
  });
}

// Every error answer says why, httplib's own included (a malformed request, an unknown path).
void SidecarHttp::answer_errors() {
  server_.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& http_request, httplib::Response& response) {
        if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        auto reason = refusal_reason(http_request, response.status, status_page_served_);
        if (http_request.path.starts_with("/api/"))
          response.set_content(fmt::format("{{\"error\":{}}}\n", json_string(reason)), "application/json");
        else
          response.set_content(reason + "\n", "text/plain; charset=utf-8");
        return httplib::Server::HandlerResponse::Handled;
      }));
}

}  // namespace dblock::cli

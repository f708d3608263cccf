#pragma once
// The reaper sidecar (`dblock reaper --listen`) run by a test: a child process killed with the
// object, and an HTTP client on its loopback address.

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <httplib.h>

#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"

namespace dblock::test {

/// The sidecar retries with backoff: it is given longer than eventually()'s default.
template <class Predicate>
bool sidecar_eventually(Predicate predicate) {
  using namespace std::chrono_literals;
  return eventually(predicate, 15s);
}

class Sidecar {
 public:
  /// `dblock --dsn DSN reaper --listen HOST:PORT --interval INTERVAL EXTRA...`; `host` is a loopback
  /// address (an IPv6 one goes to --listen in brackets).
  Sidecar(const std::string& dsn, std::uint16_t port, const std::vector<std::string>& extra = {},
          const std::string& host = "127.0.0.1", const std::string& interval = "100ms")
      : port_(port), client_(host, port) {
    std::vector<std::string> args{DBLOCK_CLI_PATH, "--dsn",  dsn,        "--log-level",
                                  "warn",          "reaper", "--listen", endpoint(host, port),
                                  "--interval",    interval};
    args.insert(args.end(), extra.begin(), extra.end());
    process_.emplace(std::move(args));
    client_.set_connection_timeout(1, 0);
    client_.set_read_timeout(5, 0);
  }

  /// The HTTP status of GET `path`, or -1 without an answer.
  int status(const std::string& path) {
    auto response = client_.Get(path);
    return response ? response->status : -1;
  }
  /// The body of GET `path`, or "" without an answer.
  std::string get(const std::string& path) {
    auto response = client_.Get(path);
    return response ? response->body : "";
  }
  /// Serving, with the database reached (the HTTP server starts before the store opens).
  bool ready() {
    return sidecar_eventually([&] { return get("/metrics").find("dblock_database_up 1\n") != std::string::npos; });
  }
  /// SIGTERM, then the exit code, or -1 when it did not exit within `limit`.
  int terminate(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    process_->signal(SIGTERM);
    auto ended = process_->wait_for(limit);
    return ended ? ended->exit_code : -1;
  }
  httplib::Client& client() { return client_; }
  [[nodiscard]] std::uint16_t port() const { return port_; }

 private:
  static std::string endpoint(const std::string& host, std::uint16_t port) {
    auto text = host.find(':') == std::string::npos ? host : "[" + host + "]";
    return text + ":" + std::to_string(port);
  }

  std::optional<ChildProcess> process_;  // killed with the sidecar
  std::uint16_t port_;
  httplib::Client client_;
};

}  // namespace dblock::test

#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace dblock::cli {

struct ReaperRequest {
  std::string dsn;
  std::chrono::milliseconds interval{10'000};
  std::size_t batch = 1000;
  std::string listen = "127.0.0.1:9464";  // empty: no HTTP endpoint
  bool once = false;
  std::uint64_t unhealthy_after = 3;                // consecutive failed cycles before /healthz says 503
  std::chrono::milliseconds census_every{15'000};   // the lock-table gauges are read at most this often
  std::chrono::milliseconds status_refresh{5'000};  // the status page's rows are read at most this often
  std::size_t status_rows = 1000;                   // most rows the status page and /status.json list
  std::string admin_token_file;  // empty: no write action; else POST /api/revoke needs this bearer token
  bool status_public = false;    // serve the status page on a non-loopback --listen address too
};

/// The sidecar: reaps until SIGTERM/SIGINT, serving /metrics, /healthz, the status page (/ and
/// /status) and /status.json, and POST /api/revoke when an admin token file is given. Expects the forwarded
/// signals to be blocked already (block_forwarded_signals). Returns the process exit code.
int run_reaper(const ReaperRequest& request, const std::shared_ptr<spdlog::logger>& logger);

}  // namespace dblock::cli

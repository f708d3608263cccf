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
  std::uint64_t unhealthy_after = 3;  // consecutive failed cycles before /healthz says 503
};

/// The sidecar: reaps until SIGTERM/SIGINT, serving /metrics and /healthz. Expects the forwarded
/// signals to be blocked already (block_forwarded_signals). Returns the process exit code.
int run_reaper(const ReaperRequest& request, const std::shared_ptr<spdlog::logger>& logger);

}  // namespace dblock::cli

#pragma once
// The sidecar's HTTP endpoints: /metrics, /healthz, the status page (/ and /status) and
// /status.json, and POST /api/revoke and /api/request-release when an admin token is given. Every error answer says
// why.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <httplib.h>
#include <spdlog/logger.h>
#include <dblock/store.hpp>

#include "dblock/metrics.hpp"
#include "dblock/reaper_command.hpp"
#include "dblock/status_source.hpp"

namespace dblock::cli {

/// The admin token from its file (trailing newline dropped). @throws InvalidArgument when the
/// file cannot be read or holds fewer than 16 characters (a guessable token protects nothing).
std::string read_admin_token(const std::string& path);

/// Serves the endpoints on `request.listen` from its own thread until destroyed. The metrics,
/// status source and store getter must outlive it; the handlers run on httplib's threads.
class SidecarHttp {
 public:
  using StoreGetter = std::function<std::shared_ptr<Store>()>;
  /// Binds and starts serving. @throws ListenError when no address of `request.listen` can be bound.
  SidecarHttp(const ReaperRequest& request, ReaperMetrics& metrics, StatusSource& status, StoreGetter current_store,
              std::string admin_token, std::shared_ptr<spdlog::logger> logger);
  /// Stops the listener and joins its thread.
  ~SidecarHttp();
  SidecarHttp(const SidecarHttp&) = delete;
  SidecarHttp& operator=(const SidecarHttp&) = delete;

 private:
  void serve_metrics_and_health();
  void serve_status_pages();
  void serve_write_actions();
  void answer_errors();
  /// POST /api/revoke and /api/request-release: the admin token checked, then `action` on the
  /// store and the name asked for, its answer as JSON.
  using WriteAction = std::string (*)(Store& store, const std::string& name, spdlog::logger& logger);
  void write_action(const httplib::Request& http_request, httplib::Response& response, WriteAction action);
  [[nodiscard]] std::string store_label() const;

  const ReaperRequest& request_;
  ReaperMetrics& metrics_;
  StatusSource& status_;
  StoreGetter current_store_;
  const std::string admin_token_;
  std::shared_ptr<spdlog::logger> logger_;
  bool status_page_served_ = false;
  httplib::Server server_;
  std::jthread thread_;
};

}  // namespace dblock::cli

#pragma once
#include <memory>
#include <mutex>

#include <dblock/store.hpp>
#include <spdlog/logger.h>

#include "backends/backend.hpp"
#include "core/release_hub.hpp"
#include "core/uri.hpp"

namespace dblock {

struct Store::Impl {
  detail::StoreUri uri;
  std::shared_ptr<spdlog::logger> logger;
  std::unique_ptr<detail::Backend> backend;
  std::chrono::milliseconds connect_timeout{0};

  std::mutex mutex;
  bool schema_checked = false;
  std::unique_ptr<detail::ReleaseHub> hub;  // created by the first waiter

  detail::ReleaseHub& release_hub() {
    std::lock_guard lock(mutex);
    if (!hub) hub = std::make_unique<detail::ReleaseHub>(*backend, logger);
    return *hub;
  }
};

namespace detail {
struct StoreAccess {
  static Store::Impl& impl(Store& store) { return *store.impl_; }
};
}  // namespace detail

}  // namespace dblock

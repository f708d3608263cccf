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
  /// A store over a backend built by hand (unit tests of the core over a scripted backend).
  static std::shared_ptr<Store> over(std::unique_ptr<Backend> backend, std::shared_ptr<spdlog::logger> logger) {
    auto impl = std::make_unique<Store::Impl>();
    impl->logger = std::move(logger);
    impl->backend = std::move(backend);
    impl->connect_timeout = std::chrono::milliseconds(1000);
    impl->schema_checked = true;
    return std::shared_ptr<Store>(new Store(std::move(impl)));
  }
};
}  // namespace detail

}  // namespace dblock

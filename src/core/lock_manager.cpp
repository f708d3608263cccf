#include <dblock/lock_manager.hpp>

#include <algorithm>

#include "core/advisory_core.hpp"
#include "core/table_core.hpp"

namespace dblock {

LockManager::LockManager(std::shared_ptr<Store> store, ManagerOptions options) {
  if (!store) throw InvalidArgument("LockManager needs a Store (got a null pointer)");
  std::shared_ptr<detail::ManagerBase> core;
  if (options.mode == LockMode::advisory)
    core = std::make_shared<detail::AdvisoryCore>(std::move(store), std::move(options));
  else
    core = std::make_shared<detail::TableCore>(std::move(store), std::move(options));
  core_ = detail::ManagerBase::start_for_users(std::move(core));
}

LockManager::~LockManager() = default;

std::optional<Lock> LockManager::try_acquire(std::string_view name, LockOptions options) {
  return core_->try_acquire(name, options);
}

Lock LockManager::acquire(std::string_view name, std::chrono::milliseconds timeout, LockOptions options) {
  return core_->acquire(name, std::min(timeout, wait_forever), options);
}

Lock LockManager::acquire(std::string_view name, std::chrono::milliseconds timeout, LockOptions options,
                          std::stop_token stop) {
  return core_->acquire(name, std::min(timeout, wait_forever), options, stop);
}

std::optional<Lock> LockManager::try_acquire(const AdvisoryKey& key, LockOptions options) {
  return core_->try_acquire(key, options);
}

Lock LockManager::acquire(const AdvisoryKey& key, std::chrono::milliseconds timeout, LockOptions options) {
  return core_->acquire(key, std::min(timeout, wait_forever), options);
}

std::string LockManager::owner_id() const { return core_->owner_for_this_thread(); }
ManagerStats LockManager::stats() const { return core_->stats(); }

}  // namespace dblock

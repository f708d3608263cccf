#include <dblock/errors.hpp>
#include <dblock/lock.hpp>

#include <spdlog/spdlog.h>

#include "core/manager_base.hpp"

namespace dblock {

Lock::Lock(std::shared_ptr<detail::ManagerBase> core, std::shared_ptr<detail::HeldLock> held, std::int64_t count)
    : core_(std::move(core)), held_(std::move(held)), count_(count) {}

Lock::Lock(Lock&& other) noexcept
    : core_(std::move(other.core_)), held_(std::move(other.held_)), count_(std::exchange(other.count_, 0)) {}

Lock& Lock::operator=(Lock&& other) noexcept {
  if (this != &other) {
    Lock old(std::move(*this));  // releases what this guard held
    core_ = std::move(other.core_);
    held_ = std::move(other.held_);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

Lock::~Lock() {
  if (!held_) return;
  try {
    release();
  } catch (const std::exception& e) {
    core_->logger().warn("releasing lock in destructor failed: {}", e.what());
  } catch (...) {
    core_->logger().warn("releasing lock in destructor failed");
  }
}

namespace {
const detail::HeldLock& require(const std::shared_ptr<detail::HeldLock>& held) {
  if (!held) throw NotHeld("this Lock guard was released or moved from");
  return *held;
}
}  // namespace

const std::string& Lock::name() const { return require(held_).name; }
std::int64_t Lock::token() const {
  require(held_);
  return core_->token_of(*held_);
}
bool Lock::lost() const { return !require(held_).believed_held(core_->local_now()); }

void Lock::hand_over(std::string_view successor) {
  require(held_);
  core_->prepare_hand_over(*held_, successor);
  release();
}

bool Lock::release_requested() const { return require(held_).release_requested.load(); }

std::stop_token Lock::stop_token() const {
  require(held_);
  return held_->stop_token();
}

std::chrono::steady_clock::time_point Lock::local_deadline() const { return require(held_).deadline(); }

void Lock::release() {
  require(held_);
  auto held = std::move(held_);
  core_->release(held);
}

}  // namespace dblock

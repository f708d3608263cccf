#include "asio/delivery.hpp"

#include <vector>

namespace dblock::detail {

bool ContextWatch::add(const std::shared_ptr<ContextBound>& bound) {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  pending_.emplace(bound.get(), bound);
  return true;
}

void ContextWatch::remove(const ContextBound* bound) {
  std::lock_guard lock(mutex_);
  pending_.erase(bound);
}

void ContextWatch::shutdown() {
  std::vector<std::shared_ptr<ContextBound>> pending;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    for (auto& [key, weak] : pending_)
      if (auto bound = weak.lock()) pending.push_back(std::move(bound));
    pending_.clear();
  }
  for (auto& bound : pending) bound->orphan();
}

}  // namespace dblock::detail

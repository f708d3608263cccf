#include "backends/statement_ids.hpp"

namespace dblock::detail {

std::size_t StatementIds::of(std::string_view sql) {
  std::lock_guard lock(mutex_);
  auto known = ids_.find(sql);
  if (known != ids_.end()) return known->second;
  auto added = ids_.emplace(std::string(sql), texts_.size());
  texts_.push_back(&added.first->first);
  return added.first->second;
}

std::size_t StatementIds::size() const {
  std::lock_guard lock(mutex_);
  return texts_.size();
}

std::optional<std::string> StatementIds::text_of(std::size_t id) const {
  std::lock_guard lock(mutex_);
  if (id >= texts_.size()) return std::nullopt;
  return *texts_[id];
}

}  // namespace dblock::detail

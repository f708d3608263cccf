#pragma once
// Prepared-statement ids assigned by code, never typed: a session caches its prepared statements in
// a vector indexed by id, so two texts on one id would run the wrong statement.

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dblock::detail {

/// One registry per backend (its pool's sessions run every statement set side by side). The same
/// text always gets the same id (one prepared statement on a session), different texts different
/// ids, dense from 0 so a session's cache stays a small vector. Thread-safe; asked when statement
/// sets are built (and for a fenced transaction's caller texts, capped per store), never per run.
class StatementIds {
 public:
  StatementIds() = default;
  StatementIds(const StatementIds&) = delete;
  StatementIds& operator=(const StatementIds&) = delete;

  [[nodiscard]] std::size_t of(std::string_view sql);
  /// How many distinct texts have an id (the next id to be given).
  [[nodiscard]] std::size_t size() const;
  /// The text behind `id`, for tests and error messages; empty when no text has it.
  [[nodiscard]] std::optional<std::string> text_of(std::size_t id) const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const noexcept { return std::hash<std::string_view>{}(text); }
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>> ids_;
  std::vector<const std::string*> texts_;  // by id: the keys of ids_, whose nodes never move
};

}  // namespace dblock::detail

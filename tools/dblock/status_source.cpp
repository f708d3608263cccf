#include "dblock/status_source.hpp"

namespace dblock::cli {

StatusSource::StatusSource(StoreGetter store, std::chrono::milliseconds census_every,
                           std::chrono::milliseconds rows_every, std::size_t row_limit)
    : store_(std::move(store)), census_every_(census_every), rows_every_(rows_every), row_limit_(row_limit) {}

std::optional<LockCensus> StatusSource::census() {
  std::lock_guard lock(census_mutex_);
  auto now = std::chrono::steady_clock::now();
  if (census_ && now - census_at_ < census_every_) return census_;
  auto store = store_();
  if (!store) return std::nullopt;
  try {
    census_ = store->census();
    census_duration_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - now);
    census_at_ = now;
  } catch (const std::exception&) {
    census_.reset();  // a scrape must not show old numbers as current while the database is down
  }
  return census_;
}

std::chrono::microseconds StatusSource::last_census_duration() const {
  std::lock_guard lock(census_mutex_);
  return census_duration_;
}

StatusSnapshot StatusSource::snapshot() {
  auto census_now = census();
  std::lock_guard lock(rows_mutex_);
  auto now = std::chrono::steady_clock::now();
  if (!rows_ || now - rows_at_ >= rows_every_) {
    StatusSnapshot fresh;
    fresh.read_at = std::chrono::system_clock::now();
    if (auto store = store_()) {
      try {
        // One more than shown tells whether there are more, without reading them all.
        auto rows = store->locks(row_limit_ + 1);
        fresh.truncated = rows.size() > row_limit_;
        if (fresh.truncated) rows.resize(row_limit_);
        fresh.rows = std::move(rows);
        auto waiters = store->waiters(row_limit_ + 1);
        fresh.waiters_truncated = waiters.size() > row_limit_;
        if (fresh.waiters_truncated) waiters.resize(row_limit_);
        fresh.waiters = std::move(waiters);
      } catch (const std::exception& e) {
        fresh.error = e.what();
      }
    } else {
      fresh.error = "the database has not been reached yet";
    }
    rows_ = std::move(fresh);
    rows_at_ = now;
  }
  auto result = *rows_;
  result.census = census_now;
  return result;
}

void StatusSource::invalidate() {
  {
    std::lock_guard lock(rows_mutex_);
    rows_.reset();
  }
  std::lock_guard lock(census_mutex_);
  census_.reset();
}

}  // namespace dblock::cli

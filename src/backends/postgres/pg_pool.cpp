#include "backends/postgres/pg_pool.hpp"

#include <fmt/format.h>

#include <dblock/errors.hpp>

namespace dblock::detail {

PgPool::PgPool(std::string uri, std::string redacted_uri, std::size_t size, std::chrono::milliseconds timeout,
               std::shared_ptr<spdlog::logger> logger)
    : uri_(std::move(uri)), redacted_uri_(std::move(redacted_uri)), size_(size), timeout_(timeout),
      logger_(std::move(logger)) {}

std::unique_ptr<PgConnection> PgPool::connect_dedicated() const {
  return std::make_unique<PgConnection>(uri_, redacted_uri_, timeout_, logger_);
}

PgPool::Lease PgPool::lease() {
  std::unique_lock lock(mutex_);
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    if (!freed_.wait_until(lock, deadline, [&] { return !idle_.empty() || open_ < size_; }))
      throw ConnectionError(fmt::format("all {} pooled sessions to {} stayed busy for {}ms (raise ?pool=)", size_,
                                        redacted_uri_, timeout_.count()));
    if (!idle_.empty()) {
      auto connection = std::move(idle_.back());
      idle_.pop_back();
      if (connection->usable()) return Lease(*this, std::move(connection));
      --open_;  // broken while idle: drop it and look again
      continue;
    }
    ++open_;
    lock.unlock();
    try {
      return Lease(*this, connect_dedicated());
    } catch (...) {
      lock.lock();
      --open_;
      freed_.notify_one();
      throw;
    }
  }
}

void PgPool::give_back(std::unique_ptr<PgConnection> connection) {
  std::lock_guard lock(mutex_);
  if (connection->usable()) idle_.push_back(std::move(connection));
  else --open_;
  freed_.notify_one();
}

}  // namespace dblock::detail

#pragma once
// A bounded pool of libpq sessions. Sessions are opened on demand up to the limit, handed out
// through an RAII lease, and taken back only when connected and idle (no open transaction);
// broken ones are dropped, and the next lease opens a fresh one.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/postgres/pg_connection.hpp"

namespace dblock::detail {

class PgPool {
 public:
  class Lease {
   public:
    Lease(PgPool& pool, std::unique_ptr<PgConnection> connection) : pool_(&pool), connection_(std::move(connection)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) noexcept = delete;
    ~Lease() { if (connection_) pool_->give_back(std::move(connection_)); }
    PgConnection* operator->() const noexcept { return connection_.get(); }
    PgConnection& operator*() const noexcept { return *connection_; }

   private:
    PgPool* pool_;
    std::unique_ptr<PgConnection> connection_;
  };

  PgPool(std::string uri, std::string redacted_uri, std::size_t size, std::chrono::milliseconds timeout,
         std::shared_ptr<spdlog::logger> logger);

  /// @throws ConnectionError when no session frees up and none can be opened within the timeout.
  [[nodiscard]] Lease lease();
  /// A session outside the pool, e.g. for a listener or the migration lock.
  [[nodiscard]] std::unique_ptr<PgConnection> connect_dedicated() const;

 private:
  void give_back(std::unique_ptr<PgConnection> connection);

  const std::string uri_;
  const std::string redacted_uri_;
  const std::size_t size_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<spdlog::logger> logger_;

  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<PgConnection>> idle_;
  std::size_t open_ = 0;  // idle + leased + being opened
};

}  // namespace dblock::detail

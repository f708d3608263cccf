#include "backends/mysql/my_bench.hpp"

#include <array>

#include <fmt/format.h>

namespace dblock::detail {

namespace {

/// Bare Connector/C++: the same prepared statements on one connection, no pool, no bookkeeping.
class MyRawClient final : public RawLockClient {
 public:
  MyRawClient(std::unique_ptr<MyConnection> connection, const MySql& sql)
      : connection_(std::move(connection)), sql_(sql) {}

  std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner,
                                      std::int64_t ttl_ms) override {
    std::array<MyParam, 4> params{name, owner, ttl_ms * 1000, std::int64_t{0}};
    auto grant = parse_grant(connection_->query(sql_.acquire, params));
    if (!grant) return std::nullopt;
    return grant->token;
  }

  bool release(const std::string& name, const std::string& owner, std::int64_t token) override {
    std::array<MyParam, 3> params{name, owner, token};
    return connection_->update(sql_.release_last, params) > 0;  // an uncontended release is a last level
  }

  bool blocking_lock(std::int64_t key) override {
    auto name = fmt::format("dblock-bench:{}", key);
    std::array<MyParam, 2> params{name, 31536000.0};
    connection_->query(blocking_lock_, params);
    return true;
  }
  void blocking_unlock(std::int64_t key) override {
    auto name = fmt::format("dblock-bench:{}", key);
    std::array<MyParam, 1> params{name};
    connection_->query(blocking_unlock_, params);
  }
  std::string_view blocking_lock_functions() const noexcept override { return "GET_LOCK + RELEASE_LOCK"; }

 private:
  std::unique_ptr<MyConnection> connection_;
  const MySql& sql_;
  MyStatement blocking_lock_{kBenchStatementIds, "GET_LOCK", "SELECT GET_LOCK(?, ?)"};
  MyStatement blocking_unlock_{kBenchStatementIds + 1, "RELEASE_LOCK", "SELECT RELEASE_LOCK(?)"};
};

}  // namespace

std::unique_ptr<RawLockClient> make_my_raw_client(std::unique_ptr<MyConnection> connection, const MySql& sql) {
  return std::make_unique<MyRawClient>(std::move(connection), sql);
}

}  // namespace dblock::detail

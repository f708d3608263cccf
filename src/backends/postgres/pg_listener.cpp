#include "backends/postgres/pg_listener.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <system_error>

#include <fmt/format.h>

#include "backends/postgres/pg_database.hpp"
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

namespace {

/// Owns an eventfd so a blocked listener wait can be interrupted from another thread.
class EventFd {
 public:
  EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw ConnectionError(fmt::format("eventfd failed: errno {}", errno));
  }
  ~EventFd() { close(fd_); }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  [[nodiscard]] int fd() const noexcept { return fd_; }
  void signal() const noexcept {
    std::uint64_t one = 1;
    [[maybe_unused]] auto written = write(fd_, &one, sizeof one);
  }
  void drain() const noexcept {
    std::uint64_t value = 0;
    [[maybe_unused]] auto got = read(fd_, &value, sizeof value);
  }

 private:
  int fd_;
};

class PgListener final : public ReleaseListener {
 public:
  PgListener(std::unique_ptr<PgConnection> connection, std::int32_t key, std::string channel)
      : connection_(std::move(connection)),
        key_(std::to_string(key)),
        channel_(std::move(channel)),
        grant_channel_(pg_grant_channel(channel_)) {
    connection_->exec(fmt::format("LISTEN \"{}\"", channel_));
    connection_->exec(fmt::format("LISTEN \"{}\"", grant_channel_));
  }

  void watch(std::string_view name) override {
    std::array<std::string, 2> params{key_, std::string(name)};
    connection_->exec_params("SELECT pg_advisory_lock_shared($1::integer, hashtext($2))", params);
  }

  void unwatch(std::string_view name) override {
    std::array<std::string, 2> params{key_, std::string(name)};
    connection_->exec_params("SELECT pg_advisory_unlock_shared($1::integer, hashtext($2))", params);
  }

  std::vector<ReleaseNotice> wait(milliseconds timeout) override {
    std::vector<ReleaseNotice> released;
    collect(released);
    if (!released.empty()) return released;
    std::array<pollfd, 2> fds{pollfd{PQsocket(connection_->raw()), POLLIN, 0}, pollfd{wake_.fd(), POLLIN, 0}};
    int ready = poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (ready < 0 && errno != EINTR) throw ConnectionError(fmt::format("poll on listener failed: errno {}", errno));
    if (fds[1].revents != 0) wake_.drain();
    if (fds[0].revents != 0) {
      if (PQconsumeInput(connection_->raw()) == 0 || PQstatus(connection_->raw()) == CONNECTION_BAD)
        throw ConnectionError(fmt::format("listener session broke: {}", PQerrorMessage(connection_->raw())));
      collect(released);
    }
    return released;
  }

  void interrupt() noexcept override { wake_.signal(); }

 private:
  void collect(std::vector<ReleaseNotice>& released) {
    while (PGnotify* notify = PQnotifies(connection_->raw())) {
      if (channel_ == notify->relname) {
        released.push_back({notify->extra, std::nullopt});
      } else if (grant_channel_ == notify->relname) {
        if (auto notice = parse_pg_grant_notice(notify->extra)) released.push_back(std::move(*notice));
      }
      PQfreemem(notify);
    }
  }

  std::unique_ptr<PgConnection> connection_;
  std::string key_;
  std::string channel_;
  std::string grant_channel_;
  EventFd wake_;
};

}  // namespace

std::optional<ReleaseNotice> parse_pg_grant_notice(std::string_view payload) {
  // '<seq>\n<token>\n<owner>\n<name>': the name last and whole (it may hold any character).
  auto number = [&payload](std::int64_t& value) {
    auto end = payload.find('\n');
    if (end == std::string_view::npos) return false;
    auto [rest, error] = std::from_chars(payload.data(), payload.data() + end, value);
    bool whole = error == std::errc() && rest == payload.data() + end && value > 0;
    payload.remove_prefix(end + 1);
    return whole;
  };
  HandedGrant grant;
  if (!number(grant.seq) || !number(grant.token)) return std::nullopt;
  auto owner_end = payload.find('\n');
  if (owner_end == 0 || owner_end == std::string_view::npos || owner_end + 1 == payload.size()) return std::nullopt;
  grant.owner = std::string(payload.substr(0, owner_end));
  return ReleaseNotice{std::string(payload.substr(owner_end + 1)), std::move(grant)};
}

std::unique_ptr<ReleaseListener> make_pg_listener(std::unique_ptr<PgConnection> connection, std::int32_t key,
                                                  std::string channel) {
  return std::make_unique<PgListener>(std::move(connection), key, std::move(channel));
}

namespace {

class PgNotifications final : public NotificationBackend {
 public:
  explicit PgNotifications(PgDatabase& database) : database_(database) {}
  std::unique_ptr<ReleaseListener> listen() override {
    // LISTEN and the watch locks are session state: behind a transaction pooler waiters poll.
    if (database_.behind_transaction_pooler()) return nullptr;
    return make_pg_listener(database_.pool.connect_dedicated(), database_.key, database_.channel);
  }

 private:
  PgDatabase& database_;
};

}  // namespace

std::unique_ptr<NotificationBackend> make_pg_notifications(PgDatabase& database) {
  return std::make_unique<PgNotifications>(database);
}

}  // namespace dblock::detail

#pragma once
// A backend over the script's in-memory lock table (lock_script.hpp), for tests of the core's
// policy without a server: the lock, group, advisory and queue roles, each statement as the script says.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "support/lock_script.hpp"
#include "support/scripted_queue.hpp"

namespace dblock_test {

/// An advisory session of the script's lock server.
class ScriptedSession final : public AdvisorySession {
 public:
  explicit ScriptedSession(std::shared_ptr<Script> script) : script_(std::move(script)) {
    std::lock_guard lock(script_->mutex);
    id_ = ++script_->next_session;
  }
  ~ScriptedSession() override {  // the server lets go of a closed session's locks
    std::lock_guard lock(script_->mutex);
    std::erase_if(script_->server_locks, [&](const auto& entry) { return entry.second == id_; });
  }
  std::optional<std::int64_t> lock(const AdvisoryTarget& target, std::chrono::milliseconds wait) override {
    if (wait.count() > 0) {
      script_->advisory_waits_gate.pass();
      std::this_thread::sleep_for(script_->server_wait);  // the server's queue
    }
    std::lock_guard lock(script_->mutex);
    auto [it, inserted] = script_->server_locks.try_emplace(std::string(target.name), id_);
    if (!inserted && it->second != id_) return std::nullopt;
    if (script_->fail_after_grant) throw *std::exchange(script_->fail_after_grant, std::nullopt);
    return script_->lazy_tokens ? 0 : ++script_->next_token;
  }
  bool unlock(const AdvisoryTarget& target) override {
    ++script_->unlocks;
    std::lock_guard lock(script_->mutex);
    auto it = script_->server_locks.find(std::string(target.name));
    if (it == script_->server_locks.end() || it->second != id_) return false;
    script_->server_locks.erase(it);
    return true;
  }
  void check_alive() override {
    bool stalls = false;
    {
      std::lock_guard lock(script_->mutex);
      if (script_->broken_sessions.contains(id_)) throw dblock::ConnectionError("connection lost (scripted)");
      stalls = script_->stalled_sessions.empty() || script_->stalled_sessions.contains(id_);
    }
    if (stalls) script_->checks_gate.pass();
  }
  std::int64_t draw_token() override {
    std::lock_guard lock(script_->mutex);
    return ++script_->next_token;
  }

 private:
  std::shared_ptr<Script> script_;
  int id_ = 0;
};

/// The lock role over the script's table.
class ScriptedLocks final : public dblock::detail::LockBackend {
 public:
  explicit ScriptedLocks(std::shared_ptr<Script> script) : script_(std::move(script)) {}

  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, std::chrono::milliseconds ttl,
                                   std::int64_t held_token,
                                   std::chrono::milliseconds /*lock_delay: not scripted*/) override {
    ++script_->acquires;
    if (script_->stepper)
      return stepped<std::optional<Grant>>("acquire", owner, {std::string(name)}, {held_token},
                                           [s = script_, n = std::string(name), o = std::string(owner), ttl,
                                            held_token] { return s->apply_acquire(n, o, ttl, held_token); });
    script_->acquires_gate.pass();
    if (script_->acquire_delay.count() > 0) std::this_thread::sleep_for(script_->acquire_delay);  // a slow reply
    auto mode = script_->acquire_unknown.exchange(Unknown::no);
    if (mode == Unknown::before_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    auto grant = script_->apply_acquire(name, owner, ttl, held_token);
    if (mode == Unknown::after_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    return grant;
  }
  std::size_t max_batch() const noexcept override { return script_->max_batch; }
  std::vector<std::optional<Grant>> try_acquire_many(
      std::span<const dblock::detail::AcquireRequest> requests) override {
    ++script_->acquires;
    ++script_->batches;
    check_order(requests);
    std::vector<AcquireCopy> copies;
    std::vector<std::string> names;
    std::vector<std::int64_t> tokens;
    std::string owners;
    for (auto& r : requests) {
      copies.push_back({std::string(r.name), std::string(r.owner), r.ttl, r.held_token});
      names.emplace_back(r.name);
      tokens.push_back(r.held_token);
      owners += (owners.empty() ? "" : ",") + std::string(r.owner);
    }
    auto apply = [s = script_, copies] {
      std::vector<std::optional<Grant>> grants;
      for (auto& c : copies) grants.push_back(s->apply_acquire(c.name, c.owner, c.ttl, c.held_token));
      return grants;
    };
    if (script_->stepper)
      return stepped<std::vector<std::optional<Grant>>>("acquire_many", owners, std::move(names), std::move(tokens),
                                                        apply);
    script_->acquires_gate.pass();
    auto mode = script_->batch_unknown.exchange(Unknown::no);
    if (mode == Unknown::before_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    auto grants = apply();
    if (mode == Unknown::after_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    return grants;
  }
  std::vector<bool> release_last_many(std::span<const dblock::detail::ReleaseRequest> requests) override {
    script_->releases_gate.pass();
    ++script_->batches;
    check_order(requests);
    std::vector<std::tuple<std::string, std::string, std::int64_t>> copies;
    std::vector<std::string> names;
    std::vector<std::int64_t> tokens;
    std::string owners;
    for (auto& r : requests) {
      copies.emplace_back(std::string(r.name), std::string(r.owner), r.token);
      names.emplace_back(r.name);
      tokens.push_back(r.token);
      owners += (owners.empty() ? "" : ",") + std::string(r.owner);
    }
    auto apply = [s = script_, copies] {
      std::vector<bool> deleted;
      for (auto& [name, owner, token] : copies)
        deleted.push_back(s->apply_release_last(name, owner, token).has_value());
      return deleted;
    };
    if (script_->stepper)
      return stepped<std::vector<bool>>("release_last_many", owners, std::move(names), std::move(tokens), apply);
    ++script_->releases;
    if (script_->sent_release_of(names)) {
      apply();
      throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    }
    auto mode = script_->release_batch_unknown.exchange(Unknown::no);
    if (mode == Unknown::before_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    auto deleted = apply();
    if (mode == Unknown::after_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    return deleted;
  }
  std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) override {
    if (script_->stepper)
      return stepped<std::optional<std::int64_t>>("release", owner, {std::string(name)}, {token},
                                                  [s = script_, n = std::string(name), o = std::string(owner), token] {
                                                    return s->apply_release(n, o, token);
                                                  });
    return scripted_release([&] { return script_->apply_release(name, owner, token); });
  }
  std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner, std::int64_t token) override {
    script_->releases_gate.pass();
    if (script_->stepper)
      return stepped<std::optional<std::int64_t>>("release_last", owner, {std::string(name)}, {token},
                                                  [s = script_, n = std::string(name), o = std::string(owner), token] {
                                                    return s->apply_release_last(n, o, token);
                                                  });
    if (script_->sent_release_of({std::string(name)})) {
      script_->apply_release_last(name, owner, token);
      throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    }
    return scripted_release([&] { return script_->apply_release_last(name, owner, token); });
  }
  dblock::detail::Renewal renew(std::span<const HeldRef> held, Clock::time_point) override {
    ++script_->renewals;
    if (script_->stepper) {
      std::vector<RenewedRef> refs;
      std::vector<std::string> names;
      std::vector<std::int64_t> tokens;
      for (auto& ref : held) {
        refs.push_back({std::string(ref.name), std::string(ref.owner), ref.token, ref.ttl});
        names.emplace_back(ref.name);
        tokens.push_back(ref.token);
      }
      return stepped<dblock::detail::Renewal>("renew", {}, std::move(names), std::move(tokens),
                                              [s = script_, refs] { return s->apply_renew(refs); });
    }
    script_->renewals_gate.pass();  // a stall that ignores the reply bound, as MySQL's would
    std::vector<RenewedRef> refs;
    for (auto& ref : held) refs.push_back({std::string(ref.name), std::string(ref.owner), ref.token, ref.ttl});
    return script_->apply_renew(refs);
  }
  std::optional<std::chrono::milliseconds> lease_left(std::string_view name) override {
    auto row = script_->row(std::string(name));
    if (!row) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::milliseconds>(row->expires - Clock::now());
  }
  bool force_release(std::string_view name) override {
    std::lock_guard lock(script_->mutex);
    if (script_->rows.erase(std::string(name)) == 0) return false;
    script_->notice_release(std::string(name));
    return true;
  }
  bool revoke(std::string_view name) override {
    std::lock_guard lock(script_->mutex);
    auto it = script_->rows.find(std::string(name));
    if (it == script_->rows.end() || it->second.owner.starts_with('(') || it->second.expires <= Clock::now())
      return false;
    it->second.owner =
        std::string(dblock::detail::kRevokedOwner) + it->second.owner.substr(0, dblock::detail::kMarkedOwnerKept);
    return true;
  }
  void set_note(std::string_view, std::string_view, std::int64_t, std::string_view) override {}
  bool ask_release(std::string_view name) override {
    std::lock_guard lock(script_->mutex);
    auto it = script_->rows.find(std::string(name));
    if (it == script_->rows.end() || it->second.owner.starts_with('(') || it->second.expires <= Clock::now())
      return false;
    it->second.asked_token = it->second.token;
    return true;
  }
  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::lock_guard lock(script_->mutex);
    auto it = script_->rows.find(std::string(name));
    auto marked =
        std::string(dblock::detail::kRevokedOwner) + std::string(owner.substr(0, dblock::detail::kMarkedOwnerKept));
    if (it == script_->rows.end() || it->second.owner != marked || it->second.token != token) return false;
    script_->rows.erase(it);
    script_->notice_release(std::string(name));
    return true;
  }
  bool release_keeping(std::string_view, std::string_view, std::int64_t, std::chrono::milliseconds) override {
    return false;  // no minimum hold here: released as usual
  }
  std::size_t reap(std::size_t) override { return 0; }
  dblock::LockCensus census() override { return {}; }
  int schema_version() override { return dblock::latest_schema_version(); }

 protected:
  std::vector<dblock::LockInfo> list_rows(std::string_view only_name, std::size_t) override {
    script_->read_rows();
    // As the backends list: one row per holder, a group's members (of its epoch) instead of its row,
    // by name and owner. So a lost-reply acquisition's read may find the caller's own membership.
    std::lock_guard lock(script_->mutex);
    auto now = Clock::now();
    auto left = [&](Clock::time_point expires) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(expires - now);
    };
    std::vector<dblock::LockInfo> rows;
    for (auto& [name, row] : script_->rows)
      if ((only_name.empty() || only_name == name) && row.owner != "(permits)" && row.owner != "(readers)")
        rows.push_back({name, row.owner, row.count, row.token, left(row.expires)});
    for (auto& [key, member] : script_->members) {
      auto& [name, owner, kind_name] = key;
      auto group = script_->rows.find(name);
      if ((!only_name.empty() && only_name != name) || kind_name == "writer" || group == script_->rows.end() ||
          group->second.token != member.epoch ||
          group->second.owner != Script::group_of(dblock::detail::kind_from_text(kind_name)))
        continue;
      rows.push_back(
          {name, owner, member.count, member.token, left(member.expires), dblock::detail::kind_from_text(kind_name)});
    }
    std::ranges::sort(
        rows, [](const auto& a, const auto& b) { return std::tie(a.name, a.owner) < std::tie(b.name, b.owner); });
    if (!only_name.empty() && !rows.empty() && rows.front().kind != HolderKind::exclusive) ++script_->member_rows_read;
    return rows;
  }

 private:
  struct AcquireCopy {
    std::string name, owner;
    std::chrono::milliseconds ttl{0};
    std::int64_t held_token = 0;
  };
  /// The backend contract: a combined statement names each name once, in byte order.
  template <class Request>
  static void check_order(std::span<const Request> requests) {
    for (std::size_t i = 1; i < requests.size(); ++i)
      if (!(requests[i - 1].name < requests[i].name))
        throw std::logic_error("a combined statement's names are not distinct and in byte order");
  }
  template <class Result, class Apply>
  Result stepped(std::string_view what, std::string_view owner, std::vector<std::string> names,
                 std::vector<std::int64_t> tokens, Apply apply) {
    return run_stepped<Result>(*script_, what, owner, std::move(names), std::move(tokens), std::move(apply));
  }
  template <class Apply>
  std::optional<std::int64_t> scripted_release(Apply apply) {
    ++script_->releases;
    auto mode = script_->release_unknown.exchange(Unknown::no);
    if (mode == Unknown::before_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    auto left = apply();
    if (mode == Unknown::after_applying) throw dblock::detail::OutcomeUnknown("reply lost (scripted)");
    return left;
  }
  std::shared_ptr<Script> script_;
};

/// The group role over the script's lock and holders tables. With a stepper, every statement that
/// writes goes through it ("acquire_member", "release_member", "renew_members", "mark_writer",
/// "unmark_writer"); the waiter's read of the first lease end writes nothing and runs at once.
class ScriptedGroups final : public dblock::detail::GroupBackend {
 public:
  explicit ScriptedGroups(std::shared_ptr<Script> script) : script_(std::move(script)) {}

  std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                          std::int64_t capacity, std::chrono::milliseconds ttl,
                                          std::int64_t held_token) override {
    ++script_->acquires;
    auto apply = [s = script_, n = std::string(name), o = std::string(owner), kind, capacity, ttl, held_token] {
      return s->apply_acquire_member(n, o, kind, capacity, ttl, held_token);
    };
    if (!script_->stepper) return apply();
    return run_stepped<std::optional<Grant>>(*script_, "acquire_member", owner, {std::string(name)}, {held_token},
                                             apply);
  }
  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token) override {
    ++script_->releases;
    auto apply = [s = script_, n = std::string(name), o = std::string(owner), kind, token] {
      return s->apply_release_member(n, o, kind, token);
    };
    if (!script_->stepper) return apply();
    return run_stepped<std::optional<std::int64_t>>(*script_, "release_member", owner, {std::string(name)}, {token},
                                                    apply);
  }
  dblock::detail::Renewal renew_members(std::span<const HeldRef> held, Clock::time_point) override {
    ++script_->renewals;
    std::vector<RenewedMember> refs;
    std::vector<std::string> names;
    std::vector<std::int64_t> tokens;
    for (const auto& ref : held) {
      refs.push_back({std::string(ref.name), std::string(ref.owner), ref.kind, ref.token, ref.ttl});
      names.emplace_back(ref.name);
      tokens.push_back(ref.token);
    }
    auto apply = [s = script_, refs] { return s->apply_renew_members(refs); };
    if (!script_->stepper) return apply();
    return run_stepped<std::vector<std::size_t>>(*script_, "renew_members", {}, std::move(names), std::move(tokens),
                                                 apply);
  }
  std::optional<std::chrono::milliseconds> first_lease_end(std::string_view name) override {
    return script_->first_lease_end(std::string(name));
  }
  std::optional<std::chrono::milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                                     std::chrono::milliseconds mark_for,
                                                                     bool& marked) override {
    using Reply = std::pair<std::optional<std::chrono::milliseconds>, bool>;
    auto apply = [s = script_, n = std::string(name), o = std::string(owner), mark_for] {
      bool now_marked = false;
      auto left = s->lease_left_marking_writer(n, o, mark_for, now_marked);
      return Reply{left, now_marked};
    };
    auto reply = script_->stepper ? run_stepped<Reply>(*script_, "mark_writer", owner, {std::string(name)}, {0}, apply)
                                  : apply();
    marked = reply.second;
    return reply.first;
  }
  void unmark_writer(std::string_view name, std::string_view owner) override {
    auto apply = [s = script_, n = std::string(name), o = std::string(owner)] {
      s->unmark_writer(n, o);
      return true;
    };
    if (!script_->stepper) {
      apply();
      return;
    }
    run_stepped<bool>(*script_, "unmark_writer", owner, {std::string(name)}, {0}, apply);
  }

 private:
  std::shared_ptr<Script> script_;
};

/// The advisory role: sessions whose locks live in the script.
class ScriptedAdvisory final : public dblock::detail::AdvisoryBackend {
 public:
  explicit ScriptedAdvisory(std::shared_ptr<Script> script) : script_(std::move(script)) {}
  std::unique_ptr<AdvisorySession> pin_advisory_session(std::chrono::milliseconds silence) override {
    {
      std::lock_guard lock(script_->mutex);
      script_->pinned_silences.push_back(silence);
    }
    return std::make_unique<ScriptedSession>(script_);
  }

 private:
  std::shared_ptr<Script> script_;
};

/// The notification role over the script's notices (Script::notice_release).
class ScriptedListener final : public dblock::detail::ReleaseListener {
 public:
  explicit ScriptedListener(std::shared_ptr<Script> script) : script_(std::move(script)) {}
  void watch(std::string_view) override {}
  void unwatch(std::string_view) override {}
  std::vector<dblock::detail::ReleaseNotice> wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(script_->notice_mutex);
    script_->notice_changed.wait_for(lock, timeout,
                                     [&] { return !script_->notices.empty() || script_->notices_interrupted; });
    script_->notices_interrupted = false;
    std::vector<dblock::detail::ReleaseNotice> heard(script_->notices.begin(), script_->notices.end());
    script_->notices.clear();
    return heard;
  }
  void interrupt() noexcept override {
    {
      std::lock_guard lock(script_->notice_mutex);
      script_->notices_interrupted = true;
    }
    script_->notice_changed.notify_all();
  }

 private:
  std::shared_ptr<Script> script_;
};

class ScriptedNotifications final : public dblock::detail::NotificationBackend {
 public:
  explicit ScriptedNotifications(std::shared_ptr<Script> script) : script_(std::move(script)) {}
  std::unique_ptr<dblock::detail::ReleaseListener> listen() override {
    return std::make_unique<ScriptedListener>(script_);
  }

 private:
  std::shared_ptr<Script> script_;
};

/// A backend with only the roles it fakes, locks, groups, advisory sessions, the fair queue and,
/// when the script hears releases (Script::notices_on), notifications; every other role is absent.
class ScriptedBackend final : public dblock::detail::Backend {
 public:
  // The script is shared: the test reads and steers it while the Store owns this backend.
  explicit ScriptedBackend(std::shared_ptr<Script> script)
      : locks_(script), groups_(script), advisory_(script), queue_(script), notifications_(script), script_(script) {}
  dblock::detail::Dialect dialect() const noexcept override { return dblock::detail::Dialect::postgresql; }

  dblock::detail::LockBackend& locks() override { return locks_; }
  Role<dblock::detail::GroupBackend> groups() override { return Role<dblock::detail::GroupBackend>::of(groups_); }
  Role<dblock::detail::AdvisoryBackend> advisory() override {
    return Role<dblock::detail::AdvisoryBackend>::of(advisory_);
  }
  Role<dblock::detail::NotificationBackend> notifications() override {
    if (!script_->notices_on) return absent<dblock::detail::NotificationBackend>();
    return Role<dblock::detail::NotificationBackend>::of(notifications_);
  }
  Role<dblock::detail::MigrationBackend> migrations() override { return absent<dblock::detail::MigrationBackend>(); }
  Role<dblock::detail::BenchBackend> bench() override { return absent<dblock::detail::BenchBackend>(); }
  Role<dblock::detail::FenceBackend> fences() override { return absent<dblock::detail::FenceBackend>(); }
  Role<dblock::detail::OccurrenceBackend> occurrences() override { return absent<dblock::detail::OccurrenceBackend>(); }
  Role<dblock::detail::QueueBackend> queue() override { return Role<dblock::detail::QueueBackend>::of(queue_); }

 private:
  template <class T>
  static Role<T> absent() {
    return Role<T>::absent("not scripted");
  }

  ScriptedLocks locks_;
  ScriptedGroups groups_;
  ScriptedAdvisory advisory_;
  ScriptedQueue queue_;
  ScriptedNotifications notifications_;
  std::shared_ptr<Script> script_;
};

}  // namespace dblock_test

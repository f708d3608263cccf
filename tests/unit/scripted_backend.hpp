#pragma once
// A backend over an in-memory lock table with the database's rules, for tests of the core's
// policy without a server: statements can be scripted to stall, to lose their reply, or (through a
// Stepper) to wait for the test to decide when they run and what becomes of their reply.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <dblock/dblock.hpp>

#include "backends/backend.hpp"

namespace dblock_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using dblock::detail::AdvisorySession;
using dblock::detail::AdvisoryTarget;
using dblock::detail::Grant;
using dblock::detail::HeldRef;
using dblock::detail::Role;

/// What a statement does when it is scripted to lose its reply.
enum class Unknown { no, after_applying, before_applying };

/// Blocks its callers until opened (or a bound passes: a test never hangs).
class Gate {
 public:
  void close() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  void pass() {
    std::unique_lock lock(mutex_);
    ++waiting_;
    opened_.wait_for(lock, 10s, [&] { return open_; });
    --waiting_;
  }
  /// How many statements wait in the gate now.
  int waiting() {
    std::lock_guard lock(mutex_);
    return waiting_;
  }

 private:
  int waiting_ = 0;
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = true;
};

/// Decides, for a test that generates interleavings, when each statement that writes runs and what
/// becomes of its reply. `statement` is called on the thread that sends the statement and returns
/// once the test has decided; `apply` takes effect then, later (through the test) or never.
class Stepper {
 public:
  virtual ~Stepper() = default;
  /// Runs `apply` as decided; throws OutcomeUnknown when the reply is to be lost (or another error
  /// when the statement fails before it is sent). `names` and `tokens`: the lock names and the
  /// fencing tokens the statement names, in step (a renewal names every lock it renews).
  virtual void statement(std::string_view what, std::string_view owner, std::vector<std::string> names,
                         std::vector<std::int64_t> tokens, std::function<void()> apply) = 0;
};

/// A lock to renew, owning its strings (a statement may run after its caller has returned).
struct RenewedRef {
  std::string name, owner;
  std::int64_t token = 0;
  std::chrono::milliseconds ttl{0};
};

/// The lock table's rules, in memory, by the steady clock; and an advisory lock server.
struct Script {
  struct Row {
    std::string owner;
    std::int64_t count = 0, token = 0;
    Clock::time_point expires;
  };
  std::mutex mutex;
  std::map<std::string, Row> rows;
  std::int64_t next_token = 0;
  std::atomic<int> acquires{0}, releases{0}, renewals{0}, unlocks{0};
  std::vector<std::chrono::milliseconds> renewed_ttls;  // of the last renewal
  // Atomic: a release is sent by its caller or by the manager's writer thread.
  std::atomic<Unknown> acquire_unknown{Unknown::no}, release_unknown{Unknown::no};
  std::chrono::milliseconds acquire_delay{0};
  std::size_t max_batch = 1;                    // above 1: the backend combines (try_acquire_many, release_last_many)
  std::atomic<Unknown> batch_unknown{Unknown::no};          // the next combined acquisition's reply
  std::atomic<Unknown> release_batch_unknown{Unknown::no};  // the next combined release's reply
  std::set<std::string> lose_release_reply;     // a last-level release of these loses its reply once applied
  std::map<std::string, int> releases_of;       // last-level release statements that named each name
  std::atomic<int> failing_reads{0};            // the next reads of rows fail (a cut connection)
  std::atomic<int> failed_reads{0};             // reads failed so far by failing_reads
  /// Counts a last-level release statement naming `names`; true when its reply is to be lost.
  bool sent_release_of(const std::vector<std::string>& names) {
    std::lock_guard lock(mutex);
    bool lose = false;
    for (const auto& name : names) {
      ++releases_of[name];
      lose = lose_release_reply.erase(name) > 0 || lose;
    }
    return lose;
  }
  Gate acquires_gate;           // every acquisition statement passes it first
  Gate releases_gate;           // every last-level release statement passes it first
  std::atomic<int> batches{0};  // combined statements sent
  Gate renewals_gate, checks_gate;
  Gate advisory_waits_gate;          // every advisory lock statement that waits server-side passes it first
  std::shared_ptr<Stepper> stepper;  // when set, every writing statement of table mode goes through it
  // Advisory: which session holds each key, and what the next lock statement does after granting.
  std::map<std::string, int> server_locks;
  int next_session = 0;
  std::optional<dblock::DatabaseError> fail_after_grant;
  std::chrono::milliseconds server_wait{0};  // how long a waiting lock statement takes to be granted

  std::optional<Grant> apply_acquire(std::string_view name, std::string_view owner, std::chrono::milliseconds ttl,
                                     std::int64_t held_token) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    auto [it, inserted] = rows.try_emplace(std::string(name));
    auto& row = it->second;
    if (!inserted && row.owner == owner && row.expires > now && row.token == held_token) {
      row.count += 1;
      row.expires = std::max(row.expires, now + ttl);
    } else if (inserted || row.expires <= now) {
      row = Row{std::string(owner), 1, ++next_token, now + ttl};
    } else if (row.owner == owner) {  // a live row of the caller's own under another token: taken over, never shortened
      row = Row{std::string(owner), 1, ++next_token, std::max(row.expires, now + ttl)};
    } else {
      return std::nullopt;
    }
    return Grant{row.count, row.token};
  }

  std::optional<std::int64_t> apply_release(std::string_view name, std::string_view owner, std::int64_t token) {
    std::lock_guard lock(mutex);
    auto it = rows.find(std::string(name));
    if (it == rows.end() || it->second.owner != owner || it->second.token != token) return std::nullopt;
    if (--it->second.count > 0) return it->second.count;
    rows.erase(it);
    return 0;
  }

  std::optional<std::int64_t> apply_release_last(std::string_view name, std::string_view owner, std::int64_t token) {
    std::lock_guard lock(mutex);
    auto it = rows.find(std::string(name));
    if (it == rows.end() || it->second.owner != owner || it->second.token != token) return std::nullopt;
    rows.erase(it);
    return 0;
  }

  std::vector<std::size_t> apply_renew(const std::vector<RenewedRef>& held) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    std::vector<std::size_t> renewed;
    renewed_ttls.clear();
    for (std::size_t i = 0; i < held.size(); ++i) {
      renewed_ttls.push_back(held[i].ttl);
      auto it = rows.find(held[i].name);
      if (it == rows.end()) continue;
      auto& row = it->second;
      if (row.owner != held[i].owner || row.token != held[i].token || row.expires <= now) continue;
      row.expires = std::max(row.expires, now + held[i].ttl);
      renewed.push_back(i);
    }
    return renewed;
  }

  std::optional<Row> row(const std::string& name) {
    std::lock_guard lock(mutex);
    auto it = rows.find(name);
    if (it == rows.end()) return std::nullopt;
    return it->second;
  }
};

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
    return ++script_->next_token;
  }
  bool unlock(const AdvisoryTarget& target) override {
    ++script_->unlocks;
    std::lock_guard lock(script_->mutex);
    auto it = script_->server_locks.find(std::string(target.name));
    if (it == script_->server_locks.end() || it->second != id_) return false;
    script_->server_locks.erase(it);
    return true;
  }
  void check_alive() override { script_->checks_gate.pass(); }
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
                                   std::int64_t held_token, std::chrono::milliseconds /*lock_delay: not scripted*/) override {
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
  std::vector<std::size_t> renew(std::span<const HeldRef> held, Clock::time_point) override {
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
      return stepped<std::vector<std::size_t>>("renew", {}, std::move(names), std::move(tokens),
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
    return script_->rows.erase(std::string(name)) > 0;
  }
  bool revoke(std::string_view name) override {
    std::lock_guard lock(script_->mutex);
    auto it = script_->rows.find(std::string(name));
    if (it == script_->rows.end() || it->second.owner.starts_with('(') || it->second.expires <= Clock::now()) return false;
    it->second.owner = std::string(dblock::detail::kRevokedOwner) + it->second.owner.substr(0, dblock::detail::kMarkedOwnerKept);
    return true;
  }
  bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) override {
    std::lock_guard lock(script_->mutex);
    auto it = script_->rows.find(std::string(name));
    auto marked = std::string(dblock::detail::kRevokedOwner) + std::string(owner.substr(0, dblock::detail::kMarkedOwnerKept));
    if (it == script_->rows.end() || it->second.owner != marked || it->second.token != token) return false;
    script_->rows.erase(it);
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
    if (script_->failing_reads > 0) {
      --script_->failing_reads;
      ++script_->failed_reads;
      throw dblock::ConnectionError("read failed (scripted)");
    }
    std::lock_guard lock(script_->mutex);
    std::vector<dblock::LockInfo> rows;
    for (auto& [name, row] : script_->rows)
      if (only_name.empty() || only_name == name)
        rows.push_back({name, row.owner, row.count, row.token,
                        std::chrono::duration_cast<std::chrono::milliseconds>(row.expires - Clock::now())});
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
  /// Runs `apply` when and as the stepper decides; its result is the reply.
  template <class Result, class Apply>
  Result stepped(std::string_view what, std::string_view owner, std::vector<std::string> names,
                 std::vector<std::int64_t> tokens, Apply apply) {
    auto reply = std::make_shared<std::optional<Result>>();
    script_->stepper->statement(what, owner, std::move(names), std::move(tokens),
                                [reply, apply = std::move(apply)] { *reply = apply(); });
    return std::move(**reply);
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

/// The advisory role: sessions whose locks live in the script.
class ScriptedAdvisory final : public dblock::detail::AdvisoryBackend {
 public:
  explicit ScriptedAdvisory(std::shared_ptr<Script> script) : script_(std::move(script)) {}
  std::unique_ptr<AdvisorySession> pin_advisory_session() override {
    return std::make_unique<ScriptedSession>(script_);
  }

 private:
  std::shared_ptr<Script> script_;
};

/// A backend with only the roles it fakes, locks and advisory sessions; every other role is absent.
class ScriptedBackend final : public dblock::detail::Backend {
 public:
  // The script is shared: the test reads and steers it while the Store owns this backend.
  explicit ScriptedBackend(std::shared_ptr<Script> script) : locks_(script), advisory_(script) {}
  dblock::detail::Dialect dialect() const noexcept override { return dblock::detail::Dialect::postgresql; }

  dblock::detail::LockBackend& locks() override { return locks_; }
  Role<dblock::detail::GroupBackend> groups() override { return absent<dblock::detail::GroupBackend>(); }
  Role<dblock::detail::AdvisoryBackend> advisory() override {
    return Role<dblock::detail::AdvisoryBackend>::of(advisory_);
  }
  Role<dblock::detail::NotificationBackend> notifications() override {
    return absent<dblock::detail::NotificationBackend>();
  }
  Role<dblock::detail::MigrationBackend> migrations() override { return absent<dblock::detail::MigrationBackend>(); }
  Role<dblock::detail::BenchBackend> bench() override { return absent<dblock::detail::BenchBackend>(); }
  Role<dblock::detail::FenceBackend> fences() override { return absent<dblock::detail::FenceBackend>(); }
  Role<dblock::detail::OccurrenceBackend> occurrences() override { return absent<dblock::detail::OccurrenceBackend>(); }

 private:
  template <class T>
  static Role<T> absent() {
    return Role<T>::absent("not scripted");
  }

  ScriptedLocks locks_;
  ScriptedAdvisory advisory_;
};

}  // namespace dblock_test

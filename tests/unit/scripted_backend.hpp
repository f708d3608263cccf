#pragma once
// A backend over an in-memory lock table with the database's rules, for tests of the core's
// policy without a server: statements can be scripted to stall, to lose their reply, or (through a
// Stepper) to wait for the test to decide when they run and what becomes of their reply.

#include <algorithm>
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
#include "base/holder_kind.hpp"

namespace dblock_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using dblock::HolderKind;
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

/// A membership to renew, owning its strings (a statement may run after its caller has returned).
struct RenewedMember {
  std::string name, owner;
  HolderKind kind = HolderKind::permit;
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
  /// A row of the holders table (migration 0004): a permit holder's or a reader's membership, or a
  /// waiting writer's mark (kind "writer", count, token and epoch 0).
  struct Member {
    std::int64_t count = 0, token = 0, epoch = 0;
    Clock::time_point expires;
    std::int64_t serial = 0;  // which insertion made the row: one taken afresh after a delete has a new one
  };
  using MemberKey = std::tuple<std::string, std::string, std::string>;  // (name, owner, kind)
  std::mutex mutex;
  std::map<std::string, Row> rows;
  /// Rows an application's fenced transaction holds (share-locked): a renewal leaves them alone,
  /// busy, and an acquisition of one answers busy, as PostgreSQL's and MariaDB's never wait on them.
  std::set<std::string> fenced;
  std::atomic<int> busy_renewals{0};
  std::map<MemberKey, Member> members;
  std::int64_t member_serials = 0;
  // Group paths taken, for tests that must know the generator still reaches them.
  std::atomic<int> members_taken_afresh{0};  // a membership row of the caller's own taken over (kept lease)
  std::atomic<int> readers_kept_levels{0};   // ... of which a reader's, keeping count+1
  std::atomic<int> writers_marked{0}, readers_held_off{0};  // marks written; readers refused for a mark
  std::atomic<int> permits_full{0};                         // permit acquisitions refused at capacity
  std::atomic<int> member_rows_read{0};                     // reads of one name whose first row was a membership
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
  bool lazy_tokens = false;                  // grants draw no token: each is drawn when first asked for
  std::set<int> stalled_sessions;            // when not empty, only these sessions' checks pass checks_gate
  std::set<int> broken_sessions;             // these sessions' checks fail as a broken connection's do
  std::chrono::milliseconds server_wait{0};  // how long a waiting lock statement takes to be granted
  std::vector<std::chrono::milliseconds> pinned_silences;  // what each pin was told (guarded by mutex)

  std::optional<Grant> apply_acquire(std::string_view name, std::string_view owner, std::chrono::milliseconds ttl,
                                     std::int64_t held_token) {
    std::lock_guard lock(mutex);
    if (fenced.contains(std::string(name))) return std::nullopt;
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

  dblock::detail::Renewal apply_renew(const std::vector<RenewedRef>& held) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    dblock::detail::Renewal renewal;
    renewed_ttls.clear();
    for (std::size_t i = 0; i < held.size(); ++i) {
      renewed_ttls.push_back(held[i].ttl);
      auto it = rows.find(held[i].name);
      if (it == rows.end()) continue;
      auto& row = it->second;
      if (row.owner != held[i].owner || row.token != held[i].token) continue;
      if (fenced.contains(held[i].name)) {
        renewal.busy.push_back(i);
        ++busy_renewals;
        continue;
      }
      if (row.expires <= now) continue;
      row.expires = std::max(row.expires, now + held[i].ttl);
      renewal.renewed.push_back(i);
    }
    return renewal;
  }

  static std::string group_of(HolderKind kind) { return kind == HolderKind::permit ? "(permits)" : "(readers)"; }

  /// migrations/postgres/0013's acquire_member: joins or re-enters a group, or starts one.
  std::optional<Grant> apply_acquire_member(std::string_view name_in, std::string_view owner_in, HolderKind kind,
                                            std::int64_t capacity, std::chrono::milliseconds ttl,
                                            std::int64_t held_token) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    auto expires = now + ttl;
    std::string name(name_in), owner(owner_in), kind_name(dblock::detail::kind_text(kind)), group = group_of(kind);
    auto row = rows.find(name);
    bool free = row == rows.end() || row->second.expires <= now;
    if (!free && row->second.owner != group) return std::nullopt;  // an exclusive holder, or the other kind
    if (!free) {
      auto member = members.find({name, owner, kind_name});
      if (member != members.end() && held_token != 0 && member->second.token == held_token &&
          member->second.epoch == row->second.token && member->second.expires > now) {
        member->second.count += 1;
        member->second.expires = std::max(member->second.expires, expires);
        row->second.expires = std::max(row->second.expires, expires);
        return Grant{member->second.count, member->second.token};
      }
      if (kind == HolderKind::permit) {
        std::int64_t live = 0;
        for (const auto& [key, m] : members)
          if (std::get<0>(key) == name && std::get<2>(key) == "permit" && m.epoch == row->second.token &&
              m.expires > now && std::get<1>(key) != owner)
            ++live;
        if (live >= capacity) {
          ++permits_full;
          return std::nullopt;
        }
      }
    }
    if (kind == HolderKind::shared)
      for (const auto& [key, m] : members)
        if (std::get<0>(key) == name && std::get<2>(key) == "writer" && m.expires > now && std::get<1>(key) != owner) {
          ++readers_held_off;
          return std::nullopt;  // a writer waits: new readers queue behind it
        }
    std::int64_t epoch = 0, token = 0;
    if (!free) {
      epoch = row->second.token;
      // 0013: a reader's own row of this group keeps its token; any other membership draws one.
      auto own = members.find({name, owner, kind_name});
      bool keeps = kind == HolderKind::shared && own != members.end() && own->second.epoch == epoch;
      token = keeps ? own->second.token : ++next_token;
      row->second.count += 1;
      row->second.expires = std::max(row->second.expires, expires);
    } else {
      epoch = token = ++next_token;
      rows[name] = Row{group, 1, epoch, expires};
      // Members of earlier groups of this name: every one of their leases has ended.
      std::erase_if(members, [&](const auto& entry) {
        return std::get<0>(entry.first) == name && std::get<2>(entry.first) != "writer";
      });
    }
    auto [member, inserted] =
        members.try_emplace({name, owner, kind_name}, Member{1, token, epoch, expires, member_serials + 1});
    if (inserted) ++member_serials;
    if (!inserted) {
      // The caller's own membership taken afresh keeps the later lease; a reader's of the same group
      // keeps its token, so its count carries the levels still to be released.
      ++members_taken_afresh;
      if (member->second.token == token) ++readers_kept_levels;
      member->second.count = member->second.token == token ? member->second.count + 1 : 1;
      member->second.token = token;
      member->second.epoch = epoch;
      member->second.expires = std::max(member->second.expires, expires);
    }
    return Grant{1, token};
  }

  /// 0004's release_member: one level; the group's row goes with its last live member, else its
  /// lease shrinks to the latest live member's.
  std::optional<std::int64_t> apply_release_member(std::string_view name_in, std::string_view owner_in, HolderKind kind,
                                                   std::int64_t token) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    std::string name(name_in), kind_name(dblock::detail::kind_text(kind));
    auto member = members.find({name, std::string(owner_in), kind_name});
    if (member == members.end() || member->second.token != token) return std::nullopt;
    auto left = --member->second.count;
    auto epoch = member->second.epoch;
    auto row = rows.find(name);
    if (row == rows.end() || row->second.token != epoch || row->second.owner != group_of(kind)) {
      members.erase(member);
      return std::nullopt;  // a lapsed member of a group that has ended
    }
    if (left > 0) return left;
    members.erase(member);
    std::int64_t live = 0;
    Clock::time_point latest{};
    for (const auto& [key, m] : members)
      if (std::get<0>(key) == name && std::get<2>(key) == kind_name && m.epoch == epoch && m.expires > now) {
        ++live;
        latest = std::max(latest, m.expires);
      }
    if (live == 0) {
      rows.erase(row);
    } else {
      row->second.count = live;
      row->second.expires = latest;
    }
    return 0;
  }

  /// 0004's renew_members: memberships still live in a live group of their kind, and the groups'
  /// rows with them, never shortened.
  std::vector<std::size_t> apply_renew_members(const std::vector<RenewedMember>& held) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    std::vector<std::size_t> renewed;
    for (std::size_t i = 0; i < held.size(); ++i) {
      auto member = members.find({held[i].name, held[i].owner, std::string(dblock::detail::kind_text(held[i].kind))});
      if (member == members.end() || member->second.token != held[i].token || member->second.expires <= now) continue;
      auto row = rows.find(held[i].name);
      if (row == rows.end() || row->second.token != member->second.epoch || row->second.expires <= now ||
          row->second.owner != group_of(held[i].kind))
        continue;
      member->second.expires = std::max(member->second.expires, now + held[i].ttl);
      row->second.expires = std::max(row->second.expires, member->second.expires);
      renewed.push_back(i);
    }
    return renewed;
  }

  /// The earliest lease of a permit group's live members, else the name's lease.
  std::optional<std::chrono::milliseconds> first_lease_end(const std::string& name) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    auto row = rows.find(name);
    if (row == rows.end()) return std::nullopt;
    std::optional<Clock::time_point> first;
    if (row->second.owner == "(permits)")
      for (const auto& [key, m] : members)
        if (std::get<0>(key) == name && std::get<2>(key) == "permit" && m.epoch == row->second.token && m.expires > now)
          first = std::min(first.value_or(m.expires), m.expires);
    return std::chrono::duration_cast<std::chrono::milliseconds>(first.value_or(row->second.expires) - now);
  }

  /// The name's lease left; while readers hold it, `owner` marked as a waiting writer.
  std::optional<std::chrono::milliseconds> lease_left_marking_writer(const std::string& name, const std::string& owner,
                                                                     std::chrono::milliseconds mark_for, bool& marked) {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    marked = false;
    auto row = rows.find(name);
    if (row == rows.end()) return std::nullopt;
    if (row->second.owner == "(readers)" && row->second.expires > now) {
      members.insert_or_assign({name, owner, "writer"}, Member{0, 0, 0, now + mark_for});
      marked = true;
      ++writers_marked;
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(row->second.expires - now);
  }

  void unmark_writer(const std::string& name, const std::string& owner) {
    std::lock_guard lock(mutex);
    members.erase({name, owner, "writer"});
  }

  /// The reaper: deletes lock rows and holders whose leases have ended, never live ones. Returns the
  /// members it deleted.
  int reap() {
    std::lock_guard lock(mutex);
    auto now = Clock::now();
    std::erase_if(rows, [&](const auto& entry) { return entry.second.expires <= now; });
    return static_cast<int>(std::erase_if(members, [&](const auto& entry) { return entry.second.expires <= now; }));
  }

  std::optional<Member> member(const std::string& name, const std::string& owner, HolderKind kind) {
    std::lock_guard lock(mutex);
    auto it = members.find({name, owner, std::string(dblock::detail::kind_text(kind))});
    if (it == members.end()) return std::nullopt;
    return it->second;
  }

  std::optional<Row> row(const std::string& name) {
    std::lock_guard lock(mutex);
    auto it = rows.find(name);
    if (it == rows.end()) return std::nullopt;
    return it->second;
  }
};

/// Runs `apply` when and as the script's stepper decides; its result is the reply.
template <class Result, class Apply>
Result run_stepped(Script& script, std::string_view what, std::string_view owner, std::vector<std::string> names,
                   std::vector<std::int64_t> tokens, Apply apply) {
  auto reply = std::make_shared<std::optional<Result>>();
  script.stepper->statement(what, owner, std::move(names), std::move(tokens),
                            [reply, apply = std::move(apply)] { *reply = apply(); });
  return std::move(**reply);
}

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

/// A backend with only the roles it fakes, locks, groups and advisory sessions; every other role is absent.
class ScriptedBackend final : public dblock::detail::Backend {
 public:
  // The script is shared: the test reads and steers it while the Store owns this backend.
  explicit ScriptedBackend(std::shared_ptr<Script> script) : locks_(script), groups_(script), advisory_(script) {}
  dblock::detail::Dialect dialect() const noexcept override { return dblock::detail::Dialect::postgresql; }

  dblock::detail::LockBackend& locks() override { return locks_; }
  Role<dblock::detail::GroupBackend> groups() override { return Role<dblock::detail::GroupBackend>::of(groups_); }
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
  ScriptedGroups groups_;
  ScriptedAdvisory advisory_;
};

}  // namespace dblock_test

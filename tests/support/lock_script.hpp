#pragma once
// The script behind the scripted backend (scripted_backend.hpp): the lock table's rules in memory,
// by the steady clock, and an advisory lock server; statements can be scripted to stall, to lose
// their reply, or (through a Stepper) to wait for the test to decide when they run and what becomes
// of their reply.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <dblock/dblock.hpp>

#include "backends/backend.hpp"
#include "backends/notification_backend.hpp"
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
    std::int64_t asked_token = 0;  // migration 0019's release_asked_token (0: none; tokens start at 1)
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
  std::size_t max_batch = 1;  // above 1: the backend combines (try_acquire_many, release_last_many)
  std::atomic<Unknown> batch_unknown{Unknown::no};          // the next combined acquisition's reply
  std::atomic<Unknown> release_batch_unknown{Unknown::no};  // the next combined release's reply
  std::set<std::string> lose_release_reply;  // a last-level release of these loses its reply once applied
  std::map<std::string, int> releases_of;    // last-level release statements that named each name
  std::atomic<int> failing_reads{0};         // the next reads of rows fail (a cut connection)
  std::atomic<int> failed_reads{0};          // reads failed so far by failing_reads
  /// A read of rows: throws as a cut connection's would while failing_reads says so.
  void read_rows() {
    if (failing_reads <= 0) return;
    --failing_reads;
    ++failed_reads;
    throw dblock::ConnectionError("read failed (scripted)");
  }
  /// A waiter row of the fair queue (migration 0017; its rules in scripted_queue.hpp).
  struct Waiter {
    std::string owner;
    std::chrono::milliseconds ttl{0};  // the lease its grant will have
    Clock::time_point expires;         // its waiter lease
  };
  std::map<std::string, std::map<std::int64_t, Waiter>> waiters;  // by name, then arrival order (seq)
  std::int64_t next_waiter_seq = 0;
  // Queue paths taken: waiter rows inserted, grants handed on by a release, free names taken by the
  // first live waiter's turn, leaves that found their row granted, dead waiter rows skipped; hand-offs
  // to a named successor ahead of earlier waiters.
  std::atomic<int> waiters_queued{0}, handoffs{0}, turns_granted{0}, leaves_after_grant{0}, dead_waiters_skipped{0},
      named_handoffs{0};
  /// Release notices, when `notices_on` (the notification role; scripted_backend.hpp's listener
  /// reads them): what a listening session is told of each release that frees a name or a place,
  /// and of each hand-off (the grant first, then the name, as migration 0020's release sends them).
  /// One release in sixteen is not heard, and one is heard again before the next (a late repeat: a
  /// grant's notice may reach a waiter after it took that grant by a read and queued again).
  bool notices_on = false;
  std::mutex notice_mutex;
  std::condition_variable notice_changed;
  std::deque<dblock::detail::ReleaseNotice> notices;            // guarded by notice_mutex
  std::vector<dblock::detail::ReleaseNotice> repeated_notices;  // guarded by notice_mutex
  std::uint64_t notices_drawn = 0;                              // guarded by notice_mutex
  bool notices_interrupted = false;                             // guarded by notice_mutex
  std::atomic<int> grant_notices{0}, notices_unheard{0}, notices_repeated{0};
  void notice_release(const std::string& name, std::optional<dblock::detail::HandedGrant> grant = std::nullopt) {
    if (!notices_on) return;
    {
      std::lock_guard lock(notice_mutex);
      auto draw = (++notices_drawn * 2654435761U) % 16;
      if (draw == 0) {
        ++notices_unheard;
        return;
      }
      for (auto& repeat : repeated_notices) notices.push_back(repeat);
      repeated_notices.clear();
      std::vector<dblock::detail::ReleaseNotice> batch;
      if (grant) batch.push_back({name, grant});
      batch.push_back({name, std::nullopt});
      for (auto& notice : batch) notices.push_back(notice);
      if (draw == 1) {
        repeated_notices = batch;
        ++notices_repeated;
      }
      if (grant) ++grant_notices;
    }
    notice_changed.notify_all();
  }
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
    notice_release(std::string(name));
    return 0;
  }

  std::optional<std::int64_t> apply_release_last(std::string_view name, std::string_view owner, std::int64_t token) {
    std::lock_guard lock(mutex);
    auto it = rows.find(std::string(name));
    if (it == rows.end() || it->second.owner != owner || it->second.token != token) return std::nullopt;
    rows.erase(it);
    notice_release(std::string(name));
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
      if (row.asked_token == row.token) renewal.asked.push_back(i);
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
    notice_release(name);
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
    reap_waiters(now);
    return static_cast<int>(std::erase_if(members, [&](const auto& entry) { return entry.second.expires <= now; }));
  }

  /// Deletes the waiter rows whose waiter lease has ended; returns how many. REQUIRES: mutex held.
  std::size_t reap_waiters(Clock::time_point now) {
    std::size_t reaped = 0;
    for (auto& [name, queue] : waiters)
      reaped += std::erase_if(queue, [&](const auto& entry) { return entry.second.expires <= now; });
    return reaped;
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

}  // namespace dblock_test

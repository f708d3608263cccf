// SQLite's groups of holders (migration 0004): each operation is one IMMEDIATE transaction, so
// SQLite's single writer serialises every group's members, with the clock read once at its start.
#include "backends/sqlite/sqlite_groups.hpp"

namespace dblock::detail {

namespace {

std::string group_owner(HolderKind kind) { return kind == HolderKind::permit ? "(permits)" : "(readers)"; }

std::int64_t read_now(soci::session& session, const SqliteGroupSql& sql) {
  std::int64_t now = 0;
  session << sql.now, soci::into(now);
  return now;
}

}  // namespace

std::optional<Grant> SqliteGroupStatements::acquire_member(std::string_view name_in, std::string_view owner_in,
                                                           HolderKind kind, std::int64_t capacity,
                                                           std::chrono::milliseconds ttl, std::int64_t held_token) {
  const auto& sql = sql_.groups;
  std::string name(name_in), owner(owner_in), kind_name(kind_text(kind)), group = group_owner(kind);
  ImmediateTransaction transaction(session_);
  std::int64_t now = read_now(session_, sql);
  std::int64_t expires = now + ttl.count();
  std::string row_owner;
  std::int64_t row_token = 0, row_expires = 0;
  session_ << sql.lock_row, soci::use(name, "name"), soci::into(row_owner), soci::into(row_token),
      soci::into(row_expires);
  bool free = !session_.got_data() || row_expires <= now;
  if (!free && row_owner != group) return std::nullopt;  // an exclusive holder, or a group of the other kind
  std::optional<std::int64_t> own_reader_token;          // the owner's reader row of this group, live or not
  if (!free) {
    std::int64_t count = 0, token = 0, epoch = 0, member_expires = 0;
    session_ << sql.member, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(kind_name, "kind"),
        soci::into(count), soci::into(token), soci::into(epoch), soci::into(member_expires);
    bool has_member = session_.got_data();
    if (has_member && kind == HolderKind::shared && epoch == row_token) own_reader_token = token;
    if (has_member && held_token != 0 && token == held_token && epoch == row_token && member_expires > now) {
      session_ << sql.reenter, soci::use(expires, "expires"), soci::use(name, "name"), soci::use(owner, "owner"),
          soci::use(kind_name, "kind");
      session_ << sql.stretch_group, soci::use(expires, "expires"), soci::use(name, "name");
      transaction.commit();
      return Grant{count + 1, token};
    }
    if (kind == HolderKind::permit) {
      std::int64_t live = 0;
      session_ << sql.live_permits, soci::use(name, "name"), soci::use(row_token, "epoch"), soci::use(now, "now"),
          soci::use(owner, "owner"), soci::into(live);
      if (live >= capacity) return std::nullopt;
    }
  }
  if (kind == HolderKind::shared) {
    std::int64_t writers = 0;
    session_ << sql.writer_waits, soci::use(name, "name"), soci::use(now, "now"), soci::use(owner, "owner"),
        soci::into(writers);
    if (writers > 0) return std::nullopt;  // a writer waits: new readers queue behind it
  }
  auto draw_token = [&] {
    std::int64_t value = 0;
    session_ << sql.next_token, soci::into(value);
    return value;
  };
  std::int64_t epoch = 0, token = 0;
  if (!free) {
    epoch = row_token;
    // A reader's own row of this group taken afresh keeps its token and count (the levels still to
    // be released); any other membership draws a token of its own (migrations/mysql/0013).
    token = own_reader_token ? *own_reader_token : draw_token();
    session_ << sql.join_group, soci::use(expires, "expires"), soci::use(name, "name");
  } else {
    epoch = token = draw_token();
    session_ << sql.start_group, soci::use(name, "name"), soci::use(group, "owner"), soci::use(epoch, "token"),
        soci::use(now, "now"), soci::use(expires, "expires");
    session_ << sql.forget_old_members, soci::use(name, "name");
  }
  session_ << sql.put_member, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(kind_name, "kind"),
      soci::use(token, "token"), soci::use(epoch, "epoch"), soci::use(now, "now"), soci::use(expires, "expires");
  transaction.commit();
  return Grant{1, token};
}

std::optional<std::int64_t> SqliteGroupStatements::release_member(std::string_view name_in, std::string_view owner_in,
                                                                  HolderKind kind, std::int64_t token) {
  const auto& sql = sql_.groups;
  std::string name(name_in), owner(owner_in), kind_name(kind_text(kind));
  ImmediateTransaction transaction(session_);
  std::int64_t now = read_now(session_, sql);
  std::string row_owner;
  std::int64_t row_token = 0, row_expires = 0;
  session_ << sql.lock_row, soci::use(name, "name"), soci::into(row_owner), soci::into(row_token),
      soci::into(row_expires);
  bool has_row = session_.got_data();
  std::int64_t count = 0, epoch = 0;
  session_ << sql.member_by_token, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(kind_name, "kind"),
      soci::use(token, "token"), soci::into(count), soci::into(epoch);
  if (!session_.got_data()) return std::nullopt;
  std::int64_t left = count - 1;
  if (!has_row || row_token != epoch || row_owner != group_owner(kind)) {
    session_ << sql.drop_member, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(kind_name, "kind");
    transaction.commit();
    return std::nullopt;  // a lapsed member of a group that has ended
  }
  if (left > 0) {
    session_ << sql.set_member_count, soci::use(left, "count"), soci::use(name, "name"), soci::use(owner, "owner"),
        soci::use(kind_name, "kind");
    transaction.commit();
    return left;
  }
  session_ << sql.drop_member, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(kind_name, "kind");
  std::int64_t live = 0, latest = 0;
  session_ << sql.live_members, soci::use(name, "name"), soci::use(kind_name, "kind"), soci::use(epoch, "epoch"),
      soci::use(now, "now"), soci::into(live), soci::into(latest);
  if (live == 0)
    session_ << sql.end_group, soci::use(name, "name");
  else
    session_ << sql.shrink_group, soci::use(live, "count"), soci::use(latest, "expires"), soci::use(name, "name");
  transaction.commit();
  return 0;
}

std::vector<std::size_t> SqliteGroupStatements::renew_members(std::span<const HeldRef> held) {
  const auto& sql = sql_.groups;
  ImmediateTransaction transaction(session_);
  std::int64_t now = read_now(session_, sql);
  std::vector<std::size_t> renewed;
  for (std::size_t i = 0; i < held.size(); ++i) {
    std::string name(held[i].name), owner(held[i].owner), kind_name(kind_text(held[i].kind)),
        group = group_owner(held[i].kind);
    std::int64_t token = held[i].token, expires = now + held[i].ttl.count(), renewed_until = 0;
    session_ << sql.renew_member, soci::use(expires, "expires"), soci::use(name, "name"), soci::use(owner, "owner"),
        soci::use(kind_name, "kind"), soci::use(token, "token"), soci::use(now, "now"), soci::use(group, "group"),
        soci::use(now, "now2"), soci::into(renewed_until);
    if (!session_.got_data()) continue;
    session_ << sql.stretch_group, soci::use(renewed_until, "expires"), soci::use(name, "name");
    renewed.push_back(i);
  }
  transaction.commit();
  return renewed;
}

std::optional<SqliteGroupStatements::LeaseRow> SqliteGroupStatements::lease_row(std::string_view name_in) {
  const auto& sql = sql_.groups;
  std::string name(name_in);
  std::int64_t now = read_now(session_, sql);
  std::string row_owner;
  std::int64_t row_token = 0, row_expires = 0;
  session_ << sql.lock_row, soci::use(name, "name"), soci::into(row_owner), soci::into(row_token),
      soci::into(row_expires);
  if (!session_.got_data()) return std::nullopt;
  return LeaseRow{std::chrono::milliseconds(row_expires - now), row_owner == "(readers)" && row_expires > now};
}

void SqliteGroupStatements::mark_writer(std::string_view name_in, std::string_view owner_in,
                                        std::chrono::milliseconds mark_for) {
  const auto& sql = sql_.groups;
  std::string name(name_in), owner(owner_in);
  std::int64_t now = read_now(session_, sql);
  std::int64_t until = now + mark_for.count();
  session_ << sql.mark_writer, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(now, "now"),
      soci::use(until, "expires");
}

std::optional<std::chrono::milliseconds> SqliteGroupStatements::first_lease_end(std::string_view name_in) {
  std::string name(name_in);
  std::int64_t now = read_now(session_, sql_.groups), left = 0;
  session_ << sql_.groups.first_lease_end, soci::use(now, "now"), soci::use(now, "now2"), soci::use(name, "name"),
      soci::into(left);
  if (!session_.got_data()) return std::nullopt;
  return std::chrono::milliseconds(left);
}

void SqliteGroupStatements::unmark_writer(std::string_view name_in, std::string_view owner_in) {
  std::string name(name_in), owner(owner_in);
  session_ << sql_.groups.unmark_writer, soci::use(name, "name"), soci::use(owner, "owner");
}

namespace {

class SqliteGroups final : public GroupBackend {
 public:
  explicit SqliteGroups(SessionPool<SqliteSession>& pool) : pool_(pool) {}

  std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                          std::int64_t capacity, milliseconds ttl, std::int64_t held_token) override {
    auto session = pool_.lease();
    return session->guarded_write(
        "acquire", [&] { return of(*session).acquire_member(name, owner, kind, capacity, ttl, held_token); });
  }

  std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                             std::int64_t token) override {
    auto session = pool_.lease();
    return session->guarded_write("release", [&] { return of(*session).release_member(name, owner, kind, token); });
  }

  Renewal renew_members(std::span<const HeldRef> held, std::chrono::steady_clock::time_point) override {
    auto session = pool_.lease();
    return session->guarded_write("renew", [&] { return of(*session).renew_members(held); });
  }

  std::optional<milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                        milliseconds mark_for, bool& marked) override {
    auto session = pool_.lease();
    marked = false;
    auto row = session->guarded("reading a lease", [&] { return of(*session).lease_row(name); });
    if (!row) return std::nullopt;
    if (row->held_by_readers) {
      session->guarded_write("marking a waiting writer", [&] { of(*session).mark_writer(name, owner, mark_for); });
      marked = true;
    }
    return row->left;
  }

  std::optional<milliseconds> first_lease_end(std::string_view name) override {
    auto session = pool_.lease();
    return session->guarded("reading a lease", [&] { return of(*session).first_lease_end(name); });
  }

  void unmark_writer(std::string_view name, std::string_view owner) override {
    auto session = pool_.lease();
    session->guarded_write("unmarking a writer", [&] { of(*session).unmark_writer(name, owner); });
  }

 private:
  static SqliteGroupStatements& of(SqliteSession& session) { return session.part<SqliteGroupStatements>(); }

  SessionPool<SqliteSession>& pool_;
};

}  // namespace

std::unique_ptr<GroupBackend> make_sqlite_groups(SessionPool<SqliteSession>& pool) {
  return std::make_unique<SqliteGroups>(pool);
}

}  // namespace dblock::detail

#include "migrate/catalog_checks.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "base/ascii_text.hpp"
#include "core/retry.hpp"
#include "migrate/history.hpp"

namespace dblock::detail {

namespace {

std::string describe(const CatalogObject& object) {
  if (object.kind == "index" && !object.table.empty())
    return fmt::format("index '{}' on '{}'", object.name, object.table);
  return fmt::format("{} '{}'", object.kind, object.name);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

std::vector<std::string> names_of(const std::vector<CatalogObject>& objects) {
  std::vector<std::string> names;
  for (auto& object : objects) {
    names.push_back(object.name);
    if (!object.table.empty()) names.push_back(object.table);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

/// The history table as the migration session creates it.
CatalogObject history_object(const MigrationDialect& dialect) {
  return objects_created_by(dialect.history_ddl(), dialect.catalog_rules()).front();
}

}  // namespace

std::vector<CatalogObject> objects_of(const MigrationDialect& dialect, const std::vector<MigrationFile>& files,
                                      const std::function<bool(int version)>& counts) {
  auto& rules = dialect.catalog_rules();
  auto objects = objects_created_by(dialect.history_ddl(), rules);
  for (auto& file : files)
    if (counts(file.version)) merge_objects(objects, objects_created_by(dialect.filled(file.sql), rules));
  return objects;
}

void refuse_foreign_objects(MigrationBackend& backend, const std::vector<MigrationFile>& files,
                            const std::vector<MigrationStatus>& statuses, bool dialect_resumes,
                            const std::string& where) {
  auto& rules = backend.migration_dialect().catalog_rules();
  auto history = history_object(backend.migration_dialect());
  auto ours = objects_of(backend.migration_dialect(), files, [&](int version) {
    auto& status = status_of(statuses, version);
    return status.state == MigrationState::applied || resumable(status, dialect_resumes);
  });
  auto planned = objects_of(backend.migration_dialect(), files,
                            [&](int version) { return status_of(statuses, version).state == MigrationState::pending; });
  std::vector<CatalogObject> candidates;
  bool history_recorded =
      std::any_of(statuses.begin(), statuses.end(), [](auto& s) { return s.state != MigrationState::pending; });
  for (auto& object : planned) {
    if (object.kind == "index" && rules.index_names_are_per_table()) continue;
    bool is_history = object.kind == history.kind && object.name == history.name;
    if (is_history ? history_recorded : std::any_of(ours.begin(), ours.end(), [&](auto& o) {
          return o.kind == object.kind && rules.same_name(o, object);
        }))
      continue;
    candidates.push_back(object);
  }
  if (candidates.empty()) return;
  std::vector<std::string> names;
  for (auto& object : candidates) names.push_back(object.name);
  std::vector<std::string> foreign;
  for (auto& live : repeat_if_reply_lost([&] { return backend.catalog(names); })) {
    if (live.kind == "index" && rules.index_names_are_per_table()) continue;
    auto planned_as = std::find_if(candidates.begin(), candidates.end(),
                                   [&](auto& o) { return rules.takes_name(o.name, live.name); });
    if (planned_as == candidates.end()) continue;
    // The history table of an earlier, interrupted first run has exactly dblock's shape: ours.
    if (planned_as->name == history.name && live.kind == "table" && live.columns == history.columns) continue;
    foreign.push_back(describe(live));
  }
  if (foreign.empty()) return;
  std::string list;
  for (auto& item : foreign) list += (list.empty() ? "" : ", ") + item;
  throw SchemaError(SchemaError::Reason::outdated,
                    fmt::format("{} already has {} under the name(s) dblock's migrations create, not created by "
                                "dblock: dblock does not adopt or replace objects it did not create. Nothing was "
                                "changed. Rename or drop them, or give dblock a prefix= of its own",
                                where, list));
}

void refuse_missing_rights(MigrationBackend& backend, const std::vector<MigrationFile>& files,
                           const std::vector<MigrationStatus>& statuses, bool dialect_resumes,
                           const std::string& where) {
  auto& rules = backend.migration_dialect().catalog_rules();
  auto runs = objects_of(backend.migration_dialect(), files, [&](int version) {
    auto& status = status_of(statuses, version);
    return status.state == MigrationState::pending || resumable(status, dialect_resumes);
  });
  auto live = repeat_if_reply_lost([&] { return backend.catalog(names_of(runs)); });
  std::vector<CatalogObject> to_create;
  std::vector<CatalogObject> to_redefine;
  for (auto& object : runs) {
    bool exists = std::any_of(live.begin(), live.end(),
                              [&](auto& have) { return have.kind == object.kind && rules.same_name(have, object); });
    (exists ? to_redefine : to_create).push_back(object);
  }
  auto missing = repeat_if_reply_lost([&] { return backend.missing_migration_rights(to_create, to_redefine); });
  if (missing.empty()) return;
  std::string list;
  for (auto& right : missing) list += (list.empty() ? "" : "; ") + right;
  throw PermissionDenied(fmt::format(
      "`dblock migrate up` cannot migrate {}: the role it connects as lacks {}. Nothing was changed. Grant those "
      "rights, or run "
      "`migrate up` as the role that owns dblock's objects (a runtime role needs only what `dblock migrate grants "
      "--role NAME` prints)",
      where, list));
}

std::vector<std::string> catalog_differences(MigrationBackend& backend, const std::vector<CatalogObject>& expected,
                                             bool& bodies_hidden) {
  auto& rules = backend.migration_dialect().catalog_rules();
  auto live = repeat_if_reply_lost([&] { return backend.catalog(names_of(expected)); });
  std::vector<std::string> differences;
  for (auto& want : expected) {
    std::vector<const CatalogObject*> found;
    for (auto& have : live)
      if (have.kind == want.kind && rules.same_name(have, want) && (want.kind != "index" || have.table == want.table))
        found.push_back(&have);
    if (found.empty()) {
      auto other = std::find_if(live.begin(), live.end(), [&](auto& have) {
        return rules.same_name(have, want) && have.kind != want.kind && have.kind != "index";
      });
      differences.push_back(other == live.end() ? fmt::format("{} is missing", describe(want))
                                                : fmt::format("{} is a {}", describe(want), other->kind));
      continue;
    }
    if (found.size() > 1) {
      differences.push_back(
          fmt::format("{} has {} definitions (an overload dblock did not create)", describe(want), found.size()));
      continue;
    }
    auto& have = *found.front();
    if (want.kind == "table" && have.columns != want.columns)
      differences.push_back(fmt::format("{} has columns ({}), dblock's migrations create ({})", describe(want),
                                        joined(have.columns), joined(want.columns)));
    if (want.kind == "table" && have.columns == want.columns && have.column_types.size() == want.column_types.size()) {
      for (std::size_t i = 0; i < want.columns.size(); ++i) {
        auto live = canonical_column_type(rules, have.column_types[i]);
        if (!same_column_type(want.column_types[i], live))
          differences.push_back(fmt::format("column '{}' of {} is {}, dblock's migrations create {}", want.columns[i],
                                            describe(want), live, want.column_types[i]));
      }
    }
    if (want.kind == "index" && !want.columns.empty() && have.columns != want.columns)
      differences.push_back(fmt::format("{} is on ({}), dblock's migrations create it on ({})", describe(want),
                                        joined(have.columns), joined(want.columns)));
    if (have.definition_hidden) {
      bodies_hidden = true;
      continue;
    }
    if (!want.definition.empty() && trim_whitespace(have.definition) != trim_whitespace(want.definition))
      differences.push_back(fmt::format("{} is not the one dblock's migrations install (its {} was replaced)",
                                        describe(want), want.kind == "trigger" ? "statement" : "body"));
  }
  // Indexes on dblock's tables that its migrations do not create (where the catalog lists them all).
  for (auto& have : live) {
    if (have.kind != "index") continue;
    bool known = std::any_of(expected.begin(), expected.end(), [&](auto& want) {
      return want.kind == "index" && want.name == have.name && want.table == have.table;
    });
    if (!known) differences.push_back(fmt::format("{} is not dblock's", describe(have)));
  }
  return differences;
}

}  // namespace dblock::detail

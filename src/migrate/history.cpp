#include "migrate/history.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::detail {

std::vector<MigrationStatus> compare(const std::vector<MigrationFile>& files,
                                     const std::vector<AppliedMigration>& history) {
  std::map<int, MigrationStatus> by_version;
  for (auto& file : files)
    by_version[file.version] = {
        file.version, std::string(file.name), MigrationState::pending, std::string(file.checksum), {}};
  for (auto& row : history) {
    auto& status = by_version[row.version];
    status.version = row.version;
    status.recorded_checksum = row.checksum;
    if (status.shipped_checksum.empty()) {
      status.name = row.name;
      status.state = MigrationState::unknown_newer;
    } else if (!row.success) {
      status.state = MigrationState::failed;
    } else {
      status.state = row.checksum == status.shipped_checksum ? MigrationState::applied : MigrationState::drifted;
    }
  }
  std::vector<MigrationStatus> out;
  for (auto& [version, status] : by_version) out.push_back(std::move(status));
  return out;
}

bool resumable(const MigrationStatus& status, bool dialect_resumes) {
  return dialect_resumes && status.state == MigrationState::failed &&
         status.recorded_checksum == status.shipped_checksum;
}

void refuse_problems(const std::vector<MigrationStatus>& statuses, const std::string& where, bool dialect_resumes) {
  for (auto& status : statuses) {
    if (resumable(status, dialect_resumes)) continue;
    auto label = fmt::format("{:04d}_{}", status.version, status.name);
    switch (status.state) {
      case MigrationState::unknown_newer:
        throw SchemaError(
            SchemaError::Reason::newer,
            fmt::format("{} has dblock migration {}, which this build does not know: upgrade dblock", where, label));
      case MigrationState::drifted:
        throw SchemaError(SchemaError::Reason::outdated,
                          fmt::format("dblock migration {} in {} was applied from a different file (checksum {} "
                                      "recorded, {} shipped): migrations must never be edited once released",
                                      label, where, status.recorded_checksum, status.shipped_checksum));
      case MigrationState::failed:
        throw SchemaError(SchemaError::Reason::outdated,
                          fmt::format("dblock migration {} in {} is recorded as failed: fix the cause, then run "
                                      "`dblock migrate up` (MySQL completes it) or `dblock migrate repair`",
                                      label, where));
      default:
        break;
    }
  }
}

const MigrationFile& status_file(const std::vector<MigrationFile>& files, int version) {
  return *std::find_if(files.begin(), files.end(), [&](auto& f) { return f.version == version; });
}

const MigrationStatus& status_of(const std::vector<MigrationStatus>& statuses, int version) {
  return *std::find_if(statuses.begin(), statuses.end(), [&](auto& s) { return s.version == version; });
}

}  // namespace dblock::detail

#include <dblock/occurrence.hpp>

#include <ctime>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <dblock/errors.hpp>
#include <dblock/text.hpp>

#include "backends/occurrence_backend.hpp"
#include "core/owner_id.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"

namespace dblock {

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLongestPeriod = std::chrono::hours(24 * 366);
constexpr milliseconds kDefaultToleranceCap = std::chrono::minutes(5);
constexpr milliseconds kExplicitKeyKeep = std::chrono::hours(24 * 7);

detail::OccurrenceBackend& occurrence_role(Store& store) {
  auto* role = detail::StoreParts::backend(store).occurrences().get_if();
  if (role == nullptr) throw InvalidArgument("this database keeps no occurrence records (once-per-occurrence runs)");
  return *role;
}

milliseconds tolerance_of(const OccurrenceOptions& options) {
  if (options.tolerance.count() >= 0) return options.tolerance;
  return std::min(options.period / 10, kDefaultToleranceCap);
}

void validate(const OccurrenceOptions& options) {
  if (!options.key.empty()) {
    if (options.period.count() != 0)
      throw InvalidArgument("an occurrence is named by a key or derived from a period, not both");
    if (options.key.size() > 255 || options.key.find('\0') != std::string::npos)
      throw InvalidArgument("an occurrence key must be 1 to 255 bytes without NUL");
    return;
  }
  if (options.period.count() <= 0 || options.period > kLongestPeriod)
    throw InvalidArgument(
        fmt::format("the occurrence period {} must be positive and at most 366 days", format_duration(options.period)));
  // A tolerance of half the period or more would move firings of two scheduled instants together.
  if (tolerance_of(options) * 2 >= options.period)
    throw InvalidArgument(fmt::format("the occurrence tolerance {} must be less than half the period {}",
                                      format_duration(tolerance_of(options)), format_duration(options.period)));
  if (options.offset.count() < 0 || options.offset >= options.period)
    throw InvalidArgument("the occurrence offset must be at least 0 and less than the period");
  // A record reaped within its own occurrence would let a late host run it again.
  if (options.keep.count() != 0 && options.keep < options.period * 2)
    throw InvalidArgument(fmt::format("occurrence records must be kept at least two periods ({}), not {}",
                                      format_duration(options.period * 2), format_duration(options.keep)));
}

milliseconds keep_of(const OccurrenceOptions& options) {
  if (options.keep.count() != 0) return options.keep;
  return options.key.empty() ? options.period * 3 : kExplicitKeyKeep;
}

/// "2024-05-01T10:00:00Z/60m": the scheduled instant (UTC) the occurrence stands for, and the period.
std::string key_of(std::int64_t start_ms, milliseconds period) {
  std::time_t seconds = start_ms / 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  auto millis = start_ms % 1000;
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}Z/{}", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                     utc.tm_hour, utc.tm_min, utc.tm_sec, millis != 0 ? fmt::format(".{:03}", millis) : "",
                     format_duration(period));
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

const char* occurrence_status_name(OccurrenceStatus status) noexcept {
  switch (status) {
    case OccurrenceStatus::running:
      return "running";
    case OccurrenceStatus::succeeded:
      return "succeeded";
    case OccurrenceStatus::failed:
      return "failed";
    case OccurrenceStatus::abandoned:
      return "abandoned";
  }
  return "running";
}

std::string occurrence_key(Store& store, const OccurrenceOptions& options) {
  validate(options);
  if (!options.key.empty()) return options.key;
  // The database's clock, the one every host shares: a host's own clock would put the boundary
  // wherever its skew puts it. The tolerance moves the boundary earlier, so that a host firing a
  // little before the scheduled instant (its timer's clock runs ahead) still lands in it.
  auto now = detail::retry_read([&] { return occurrence_role(store).clock_ms(); });
  auto period = options.period.count();
  auto index = floor_div(now - options.offset.count() + tolerance_of(options).count(), period);
  return key_of(index * period + options.offset.count(), options.period);
}

std::vector<OccurrenceInfo> occurrences(Store& store) {
  return detail::retry_read([&] { return occurrence_role(store).list({}); });
}

Occurrence Occurrence::claim(const std::shared_ptr<Store>& store, const Lock& lock, const OccurrenceOptions& options) {
  if (!store) throw InvalidArgument("Occurrence::claim needs a Store (got a null pointer)");
  Occurrence occurrence;
  occurrence.store_ = store;
  occurrence.name_ = lock.name();
  occurrence.token_ = lock.token();
  occurrence.key_ = occurrence_key(*store, options);
  auto owner = detail::make_manager_owner_id("occurrence");
  detail::OccurrenceClaimRef ref{occurrence.name_,  occurrence.key_,  owner,
                                 occurrence.token_, keep_of(options), options.retry_failed};
  auto& role = occurrence_role(*store);
  // Safe to repeat: a claim whose reply was lost finds the row carrying this token, and takes it.
  occurrence.claimed_ = detail::retry_read([&] { return role.claim(ref); });
  if (!occurrence.claimed_) {
    for (auto& row : detail::retry_read([&] { return role.list(occurrence.name_); }))
      if (row.occurrence == occurrence.key_) occurrence.existing_ = row;
  }
  return occurrence;
}

bool Occurrence::finish(int exit_code) {
  if (!claimed_ || finished_) return false;
  finished_ = true;
  auto& role = occurrence_role(*store_);
  return detail::retry_read([&] { return role.finish(name_, key_, token_, exit_code); });
}

Occurrence::Occurrence(Occurrence&& other) noexcept
    : store_(std::move(other.store_)),
      name_(std::move(other.name_)),
      key_(std::move(other.key_)),
      token_(other.token_),
      claimed_(other.claimed_),
      finished_(other.finished_),
      existing_(std::move(other.existing_)) {
  other.claimed_ = false;
}

Occurrence::~Occurrence() {
  if (!claimed_ || finished_) return;
  try {
    finish(-1);  // the run ended without saying how: an exception, most likely
  } catch (const std::exception& e) {
    detail::StoreParts::logger(*store_)->warn("could not record occurrence '{}' of '{}' as failed: {}", key_, name_,
                                              e.what());
  }
}

}  // namespace dblock

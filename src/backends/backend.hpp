#pragma once
// The internal interface every database implements, as five roles, each in its own header and
// used by its own client: locks and groups of holders (the core's managers, the reaper), advisory sessions (advisory
// mode, transaction-scoped locks), migrations (the migrator) and the bench floor (`dblock bench`).
// A backend speaks locks, not SQL: each call is one domain operation. It holds no threads and no
// policy (no retries, no waiting); it translates driver errors into dblock exceptions, marking
// transient ones and those whose outcome is unknown (backend_errors.hpp) so that the core decides.

#include "backends/advisory_backend.hpp"
#include "backends/bench_backend.hpp"
#include "backends/fence_backend.hpp"
#include "backends/group_backend.hpp"
#include "backends/lock_backend.hpp"
#include "backends/migration_backend.hpp"
#include "backends/occurrence_backend.hpp"

namespace dblock::detail {

class Backend : public LockBackend, public GroupBackend, public AdvisoryBackend, public MigrationBackend, public BenchBackend {
 public:
  /// The occurrence role (occurrence_backend.hpp), which every table backend has; nullptr without.
  virtual OccurrenceBackend* occurrences() { return nullptr; }
  /// The fence role (fence_backend.hpp), which every table backend has; nullptr without.
  virtual FenceBackend* fences() { return nullptr; }
};

}  // namespace dblock::detail

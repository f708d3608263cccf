#pragma once
// What a backend can be opened with besides its URI, for dblock::testing only: a clock the database
// reads instead of its own, and a hook before each statement (faults on demand). Production stores
// open with neither. Only the SQLite backend honours them (make_backend refuses them elsewhere).

#include <cstdint>
#include <string_view>

namespace dblock::detail {

/// The database's clock, in milliseconds since the Unix epoch. Called from any thread, on every
/// statement that reads the time: must be cheap, thread-safe and never go back.
class DatabaseClock {
 public:
  virtual ~DatabaseClock() = default;
  [[nodiscard]] virtual std::int64_t now_ms() const noexcept = 0;
};

/// What the statement about to run meets instead of the database.
enum class StatementFault {
  none,        ///< it runs
  busy,        ///< the database is busy (SQLite's SQLITE_BUSY): a TransientError, nothing ran
  error,       ///< the statement fails (SQLite's SQLITE_IOERR, "disk I/O error"): a DatabaseError, nothing ran
  disconnect,  ///< the connection drops before it is sent: a ConnectionError, nothing ran
  reply_lost,  ///< it runs, and its reply is lost: OutcomeUnknown
};

/// Consulted on the thread that runs a statement, before it runs (and before it waits for the
/// file's writer turn). `what` is the backend's name for the operation ("acquire", "renew",
/// "release", ...). May block (a stalled statement); must not run statements itself.
class StatementHook {
 public:
  virtual ~StatementHook() = default;
  virtual StatementFault before(std::string_view what) = 0;
};

}  // namespace dblock::detail

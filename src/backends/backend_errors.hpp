#pragma once
// The errors a backend marks for the core to decide on: safe to run again, or outcome unknown.

#include <dblock/errors.hpp>

namespace dblock::detail {

/// A deadlock, serialization failure or busy database: safe to run the statement again.
class TransientError : public DatabaseError {
 public:
  using DatabaseError::DatabaseError;
};

/// A statement gave up waiting for a row or lock another transaction held (PostgreSQL's
/// lock_timeout, 55P03; MySQL/MariaDB's innodb_lock_wait_timeout, 1205): nothing of it took effect.
class LockWaitTimedOut : public TransientError {
 public:
  using TransientError::TransientError;
};

/// The connection broke after the statement may have been sent: it may or may not have run.
class OutcomeUnknown : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

}  // namespace dblock::detail

#pragma once
// The errors a backend marks for the core to decide on: safe to run again, or outcome unknown.

#include <dblock/errors.hpp>

namespace dblock::detail {

/// A deadlock, serialization failure or busy database: safe to run the statement again.
class TransientError : public DatabaseError {
 public:
  using DatabaseError::DatabaseError;
};

/// The connection broke after the statement may have been sent: it may or may not have run.
class OutcomeUnknown : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

}  // namespace dblock::detail

#pragma once
// What every backend role can say about itself: the dialect it speaks (messages, and rules such as
// MySQL's case-insensitive routine names).

#include "base/dialect.hpp"

namespace dblock::detail {

class DialectBound {
 public:
  virtual ~DialectBound() = default;
  [[nodiscard]] virtual Dialect dialect() const noexcept = 0;
};

}  // namespace dblock::detail

#pragma once
// A libpq connection a test opens itself (the application's own, a pinned pooler client), closed
// when it goes out of scope.

#include <libpq-fe.h>

#include <memory>

namespace dblock::test {

struct PgConnectionCloser {
  void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
};

using PgConnection = std::unique_ptr<PGconn, PgConnectionCloser>;

}  // namespace dblock::test

#pragma once
// What the C++ blocks of the docs find around them. tests/docs/doc_blocks.py wraps each block of
// README.md and doc/*.md marked `compile` or `run` into doc_examples.cpp (doc/architecture.md,
// "Examples in the docs"): a block of statements becomes the body of a function that sees the
// names below, as the prose around an example assumes them; a block with `int main` (or marked
// `toplevel`) is a namespace of its own. A block marked `run` runs on a fresh embedded SQLite
// store (dblock migrated, the application's tables orders(id, state) holding order 42 and exports
// holding export 7, both in state 'new').
//
// The names a block may use without declaring them:
//   store        std::shared_ptr<dblock::Store>
//   locks        dblock::LockManager& on store (manager: the same); with `asio`,
//                dblock::AsyncLockManager& on store, and me (dblock::TaskOwner), io (asio::io_context),
//                lock (a dblock::Lock held on the name "doc/held")
//   tracing      dblock::LockTracing& (a MyTracer's); with `prometheus`, registry
//                (std::shared_ptr<prometheus::Registry>) and metrics (dblock::PrometheusMetrics&)
//   conn         PGconn* (postgres; nullptr: only for blocks that compile)
//   order_state  order_state(42) is order 42's state, export_state(7) export 7's, for a `check:`
// and the application's own functions, which do nothing here: run_report(token),
// read_catalog(token), transfer(token, token), start_scheduling(token), stop_scheduling(), class
// MyTracer (a dblock::Tracer); with asio, write_order(token) and lead(token), each an
// asio::awaitable<void>. An example that needs another name gets it here.

#include <dblock/dblock.hpp>
#include <dblock/testing.hpp>
#include <dblock/tracing.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <sqlite3.h>

#if DBLOCK_DOC_WITH_POSTGRES
#include <libpq-fe.h>
#include <dblock/postgres.hpp>
#endif
#if DBLOCK_DOC_WITH_ASIO
#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <dblock/asio.hpp>
#endif
#if DBLOCK_DOC_WITH_PROMETHEUS
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <dblock/prometheus.hpp>
#endif

namespace doc {

/// A block that ran but did not do what it says (its `check:` is false, its main returned non-zero).
struct Failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void run_report(std::int64_t /*token*/) {}
inline void read_catalog(std::int64_t /*token*/) {}
inline void transfer(std::int64_t /*from_token*/, std::int64_t /*to_token*/) {}
inline void start_scheduling(std::int64_t /*token*/) {}
inline void stop_scheduling() {}

/// A tracer whose spans go nowhere.
class MyTracer final : public dblock::Tracer {
  class NoSpan final : public dblock::Span {
   public:
    void set_attribute(std::string_view /*key*/, dblock::SpanAttribute /*value*/) override {}
    void set_error(std::string_view /*description*/) override {}
    void end(std::chrono::system_clock::time_point /*at*/) override {}
  };

 public:
  [[nodiscard]] std::unique_ptr<dblock::Span> start_span(std::string_view /*name*/,
                                                         std::chrono::system_clock::time_point /*start*/) override {
    return std::make_unique<NoSpan>();
  }
};

#if DBLOCK_DOC_WITH_ASIO
inline asio::awaitable<void> write_order(std::int64_t /*token*/) { co_return; }
inline asio::awaitable<void> lead(std::int64_t /*token*/) { co_return; }
#endif

/// Runs SQL on the ambient store's database file (sqlite3's own API: the application's tables).
inline void sqlite_exec(const std::filesystem::path& file, const std::string& sql,
                        std::vector<std::string>* first_column = nullptr) {
  sqlite3* db = nullptr;
  if (sqlite3_open(file.c_str(), &db) != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw std::runtime_error("sqlite3_open " + file.string() + ": " + message);
  }
  sqlite3_busy_timeout(db, 10'000);
  auto collect = [](void* rows, int columns, char** values, char** /*names*/) {
    if (rows != nullptr && columns > 0)
      static_cast<std::vector<std::string>*>(rows)->emplace_back(values[0] != nullptr ? values[0] : "");
    return 0;
  };
  char* error = nullptr;
  int status = sqlite3_exec(db, sql.c_str(), collect, first_column, &error);
  std::string message = error != nullptr ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  if (status != SQLITE_OK) throw std::runtime_error("sqlite3: " + sql + ": " + message);
}

/// What a block finds around it (see the top of this file). Made fresh for each block that runs.
struct Ambient {
  explicit Ambient(std::filesystem::path directory)
      : dir(std::move(directory)),
        database(dir / "doc.db"),
        store(open_migrated(database)),
        locks(store),
        tracing(std::make_shared<MyTracer>(), dblock::TracingOptions::of(*store))
#if DBLOCK_DOC_WITH_ASIO
        ,
        async_locks(io.get_executor(), store),
        held(locks.acquire("doc/held", std::chrono::seconds(5)))
#endif
#if DBLOCK_DOC_WITH_PROMETHEUS
        ,
        registry(std::make_shared<prometheus::Registry>()),
        metrics(*registry)
#endif
  {
    sqlite_exec(database,
                "CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL);"
                "INSERT INTO orders (id, state) VALUES (42, 'new');"
                "CREATE TABLE exports (id INTEGER PRIMARY KEY, state TEXT NOT NULL);"
                "INSERT INTO exports (id, state) VALUES (7, 'new');");
  }

  [[nodiscard]] std::string state_of(const std::string& table, int id) const {
    std::vector<std::string> states;
    sqlite_exec(database, "SELECT state FROM " + table + " WHERE id = " + std::to_string(id), &states);
    return states.empty() ? std::string() : states.front();
  }

  static std::shared_ptr<dblock::Store> open_migrated(const std::filesystem::path& file) {
    auto opened = dblock::Store::open("sqlite://" + file.string());
    dblock::migrate(*opened);
    return opened;
  }

  std::filesystem::path dir;
  std::filesystem::path database;
  std::shared_ptr<dblock::Store> store;
  dblock::LockManager locks;
  dblock::LockTracing tracing;
#if DBLOCK_DOC_WITH_POSTGRES
  PGconn* conn = nullptr;
#endif
#if DBLOCK_DOC_WITH_ASIO
  asio::io_context io;
  dblock::AsyncLockManager async_locks;
  dblock::Lock held;
  dblock::TaskOwner me;
#endif
#if DBLOCK_DOC_WITH_PROMETHEUS
  std::shared_ptr<prometheus::Registry> registry;
  dblock::PrometheusMetrics metrics;
#endif
};

// The bindings at the top of each wrapped block; the block's own declarations shadow them.
#if DBLOCK_DOC_WITH_POSTGRES
#define DOC_AMBIENT_POSTGRES(a) [[maybe_unused]] PGconn* conn = (a).conn;
#else
#define DOC_AMBIENT_POSTGRES(a)
#endif
#if DBLOCK_DOC_WITH_PROMETHEUS
#define DOC_AMBIENT_PROMETHEUS(a)                 \
  [[maybe_unused]] auto& registry = (a).registry; \
  [[maybe_unused]] auto& metrics = (a).metrics;
#else
#define DOC_AMBIENT_PROMETHEUS(a)
#endif
#define DOC_AMBIENT_COMMON(a)                               \
  [[maybe_unused]] auto& store = (a).store;                 \
  [[maybe_unused]] auto& tracing = (a).tracing;             \
  [[maybe_unused]] doc::StateOf order_state{a, "orders"};   \
  [[maybe_unused]] doc::StateOf export_state{a, "exports"}; \
  DOC_AMBIENT_POSTGRES(a) DOC_AMBIENT_PROMETHEUS(a)
#define DOC_AMBIENT(a)                      \
  DOC_AMBIENT_COMMON(a)                     \
  [[maybe_unused]] auto& locks = (a).locks; \
  [[maybe_unused]] auto& manager = (a).locks;
#if DBLOCK_DOC_WITH_ASIO
#define DOC_AMBIENT_ASIO(a)                         \
  DOC_AMBIENT_COMMON(a)                             \
  [[maybe_unused]] auto& locks = (a).async_locks;   \
  [[maybe_unused]] auto& manager = (a).async_locks; \
  [[maybe_unused]] auto& io = (a).io;               \
  [[maybe_unused]] auto& lock = (a).held;           \
  [[maybe_unused]] auto& me = (a).me;
#endif

/// order_state(42), export_state(7): a named type, not a lambda, so that a coroutine's frame may
/// hold it.
struct StateOf {
  const Ambient& ambient;
  const char* table;
  std::string operator()(int id) const { return ambient.state_of(table, id); }
};

struct Block {
  const char* where;  // file:line of the block's opening fence
  void (*fragment)(Ambient&);
};

inline char** program_name() {
  static char name[] = "doc_example";
  static char* argv[] = {name, nullptr};
  return argv;
}

/// Runs the blocks marked `run` (all, or those whose file:line is named), each on a fresh
/// ambient store in a directory of its own; prints each outcome, and fails if any block failed.
inline int run_blocks(int argc, char** argv, const Block* blocks) {
  int ran = 0;
  int failed = 0;
  for (const Block* block = blocks; block->where != nullptr; ++block) {
    bool chosen = argc <= 1;
    for (int i = 1; i < argc; ++i) chosen = chosen || std::string_view(argv[i]) == block->where;
    if (!chosen) continue;
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/dblock-doc-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    ++ran;
    try {
      Ambient ambient(pattern);
      block->fragment(ambient);
      std::printf("ok %s\n", block->where);
    } catch (const std::exception& e) {
      ++failed;
      std::printf("FAILED %s: %s\n", block->where, e.what());
    }
    std::error_code ignored;
    std::filesystem::remove_all(pattern, ignored);
  }
  std::printf("%d C++ blocks ran, %d failed\n", ran, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace doc

using doc::MyTracer;
using doc::read_catalog;
using doc::run_report;
using doc::start_scheduling;
using doc::stop_scheduling;
using doc::transfer;
#if DBLOCK_DOC_WITH_ASIO
using doc::lead;
using doc::write_order;
#endif

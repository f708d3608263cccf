#pragma once
// This build's programs and files that a test runs or reads (the CLI, the workers, the server
// script), compiled in relative to the test program's own directory and resolved against it when
// the test starts (dblock_test_paths in tests/CMakeLists.txt). An absolute path of the checkout in
// a definition would make every clone in another folder compile the tests anew: the compiler cache
// could not serve them (doc/architecture.md, "Tests").
#include <filesystem>
#include <string>

namespace dblock::test {

// RELATIVE, a path relative to the directory of the running test program, as an absolute path.
inline std::string beside_this_program(const char* relative) {
  static const std::filesystem::path directory = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  return (directory / relative).lexically_normal().string();
}

// Resolved at start-up, not on first use: a forked child calls execl(DBLOCK_CLI_PATH, ...) and
// must not allocate.
#ifdef DBLOCK_CLI_PATH_RELATIVE
inline const std::string cli_path = beside_this_program(DBLOCK_CLI_PATH_RELATIVE);
#define DBLOCK_CLI_PATH (::dblock::test::cli_path.c_str())
#endif
#ifdef DBLOCK_TESTDB_SCRIPT_RELATIVE
inline const std::string testdb_script = beside_this_program(DBLOCK_TESTDB_SCRIPT_RELATIVE);
#define DBLOCK_TESTDB_SCRIPT (::dblock::test::testdb_script.c_str())
#endif
#ifdef DBLOCK_RUN_UNIT_PATH_RELATIVE
inline const std::string run_unit_path = beside_this_program(DBLOCK_RUN_UNIT_PATH_RELATIVE);
#define DBLOCK_RUN_UNIT_PATH (::dblock::test::run_unit_path.c_str())
#endif
#ifdef NEMESIS_WORKER_PATH_RELATIVE
inline const std::string nemesis_worker_path = beside_this_program(NEMESIS_WORKER_PATH_RELATIVE);
#define NEMESIS_WORKER_PATH (::dblock::test::nemesis_worker_path.c_str())
#endif
#ifdef WRITE_WORKER_PATH_RELATIVE
inline const std::string write_worker_path = beside_this_program(WRITE_WORKER_PATH_RELATIVE);
#define WRITE_WORKER_PATH (::dblock::test::write_worker_path.c_str())
#endif
#ifdef DBLOCK_ASIO_EXAMPLE_PATH_RELATIVE
inline const std::string asio_example_path = beside_this_program(DBLOCK_ASIO_EXAMPLE_PATH_RELATIVE);
#define DBLOCK_ASIO_EXAMPLE_PATH (::dblock::test::asio_example_path.c_str())
#endif

}  // namespace dblock::test

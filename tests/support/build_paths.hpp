#pragma once
// This build's programs and files that a test runs or reads (the CLI, the workers, the server
// script), compiled in relative to the test program's own directory and resolved against it when
// the test starts (dblock_test_paths in tests/CMakeLists.txt). An absolute path of the checkout in
// a definition would make every clone in another folder compile the tests anew: the compiler cache
// could not serve them (doc/architecture.md, "Tests").
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <string>

namespace dblock::test {

// RELATIVE, a path relative to the directory of the running test program, as an absolute path.
inline std::string beside_this_program(const char* relative) {
  static const std::filesystem::path directory = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  return (directory / relative).lexically_normal().string();
}

// A string literal as a template argument: each relative path is a variable of its own.
template <std::size_t N>
struct RelativePath {
  char text[N]{};
  constexpr RelativePath(const char (&literal)[N]) { std::copy_n(literal, N, text); }  // NOLINT: implicit on purpose
};

// Resolved at start-up (a variable with static storage), not on first use: a forked child calls
// execl(DBLOCK_CLI_PATH, ...) and must not allocate.
template <RelativePath relative>
inline const std::string build_path = beside_this_program(relative.text);

}  // namespace dblock::test

// NAME_RELATIVE comes from dblock_test_paths; NAME is the absolute path, as a C string.
#define DBLOCK_BUILD_PATH(relative) (::dblock::test::build_path<relative>.c_str())
#define DBLOCK_CLI_PATH DBLOCK_BUILD_PATH(DBLOCK_CLI_PATH_RELATIVE)
#define DBLOCK_TESTDB_SCRIPT DBLOCK_BUILD_PATH(DBLOCK_TESTDB_SCRIPT_RELATIVE)
#define DBLOCK_RUN_UNIT_PATH DBLOCK_BUILD_PATH(DBLOCK_RUN_UNIT_PATH_RELATIVE)
#define NEMESIS_WORKER_PATH DBLOCK_BUILD_PATH(NEMESIS_WORKER_PATH_RELATIVE)
#define WRITE_WORKER_PATH DBLOCK_BUILD_PATH(WRITE_WORKER_PATH_RELATIVE)
#define DBLOCK_ASIO_EXAMPLE_PATH DBLOCK_BUILD_PATH(DBLOCK_ASIO_EXAMPLE_PATH_RELATIVE)

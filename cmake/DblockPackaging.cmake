# What the CLI installs besides itself (component "cli"): manual pages made from its own --help,
# bash completion and systemd units; and the Debian packages CPack builds from the two components:
#   dblock         the CLI, its pages, completion and units
#   libdblock-dev  headers, the library, the CMake package and dblock.pc
# `cpack -G DEB` in a build configured with CMAKE_INSTALL_PREFIX=/usr (preset "package").

install(TARGETS dblock_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)

find_program(HELP2MAN help2man REQUIRED)
set(_man_dir "${CMAKE_CURRENT_BINARY_DIR}/man")
add_custom_command(
  OUTPUT "${_man_dir}/dblock.1.gz"
  COMMAND "${CMAKE_CURRENT_SOURCE_DIR}/tools/man/make_man_pages.sh" $<TARGET_FILE:dblock_cli> "${PROJECT_VERSION}" "${_man_dir}"
  DEPENDS dblock_cli "${CMAKE_CURRENT_SOURCE_DIR}/tools/man/make_man_pages.sh" "${CMAKE_CURRENT_SOURCE_DIR}/tools/man/cli_help.sh"
  COMMENT "Manual pages from the CLI's --help"
  VERBATIM)
add_custom_target(dblock_man_pages ALL DEPENDS "${_man_dir}/dblock.1.gz")
install(DIRECTORY "${_man_dir}/" DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT cli FILES_MATCHING PATTERN "*.1.gz")

install(FILES tools/completion/dblock.bash RENAME dblock
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT cli)
# The units name the CLI where this build installs it. Debian 12 has merged /usr, so
# PREFIX/lib/systemd/system is /usr/lib/systemd/system for the packages (and systemd also reads
# /usr/local/lib/systemd/system).
set(DBLOCK_INSTALLED_CLI "${CMAKE_INSTALL_FULL_BINDIR}/dblock")
foreach(unit dblock-reaper.service dblock-run@.service dblock-run@.timer)
  configure_file("tools/systemd/${unit}.in" "${CMAKE_CURRENT_BINARY_DIR}/systemd/${unit}" @ONLY)
  install(FILES "${CMAKE_CURRENT_BINARY_DIR}/systemd/${unit}" DESTINATION lib/systemd/system COMPONENT cli)
endforeach()
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT cli)
install(DIRECTORY doc/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT cli FILES_MATCHING PATTERN "*.md" PATTERN bench EXCLUDE)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dblock)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "dblock developers <dblock@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL cli dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# Strips the CLI (install/strip leaves static archives alone: libdblock.a keeps its symbols).
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_CLI_PACKAGE_NAME dblock)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_CLI_PACKAGE_SHLIBDEPS ON)  # libpq5, libmysqlcppconn7v5, libsoci-*, ... from the binary
set(CPACK_DEBIAN_CLI_DESCRIPTION "distributed locks in the SQL database you already run (CLI and reaper)
 dblock run guards a command with a lock in PostgreSQL, MySQL/MariaDB or
 an embedded SQLite file; dblock reaper deletes expired locks; dblock
 migrate manages dblock's tables. Ships systemd units for the reaper and
 for lock-guarded periodic jobs.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdblock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(_dev_depends "libspdlog-dev (>= 1:1.10), libfmt-dev (>= 9), libsoci-dev (>= 4.0), libsqlite3-dev")
if(DBLOCK_WITH_POSTGRES)
  string(APPEND _dev_depends ", libpq-dev (>= 15)")
endif()
if(DBLOCK_WITH_MYSQL)
  string(APPEND _dev_depends ", libmysqlcppconn-dev (>= 1.1)")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_dev_depends}")
# Optional parts of libdblock-dev need more only where they are used: <dblock/asio.hpp> includes
# <asio.hpp>; dblock::prometheus (libdblock_prometheus, dblockPrometheusTargets.cmake) links prometheus-cpp.
set(_dev_suggests "")
if(DBLOCK_WITH_ASIO)
  list(APPEND _dev_suggests "libasio-dev (>= 1:1.22)")
endif()
if(TARGET dblock_prometheus)
  list(APPEND _dev_suggests "prometheus-cpp-dev (>= 1.0)")
endif()
list(JOIN _dev_suggests ", " CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS)
set(CPACK_DEBIAN_DEV_DESCRIPTION "distributed locks in the SQL database you already run (C++ library)
 A C++20 library of re-entrant, renewed, fenced locks stored in
 PostgreSQL, MySQL/MariaDB or an embedded SQLite file, with semaphores,
 read-write locks, leader election and a reaper. Headers, the static
 library, its CMake package (find_package(dblock)) and dblock.pc.")
include(CPack)

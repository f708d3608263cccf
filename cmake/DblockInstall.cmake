# Install rules of the library (component "dev") and the files a consumer finds it by: the CMake
# package (find_package(dblock)) and dblock.pc (pkg-config).

install(TARGETS dblock EXPORT dblockTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev NAMELINK_COMPONENT dev
        FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/dblock)
install(EXPORT dblockTargets NAMESPACE dblock:: DESTINATION ${_cmake_dir} COMPONENT dev)
configure_package_config_file(cmake/dblockConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/dblockConfig.cmake"
                              INSTALL_DESTINATION ${_cmake_dir})
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/dblockConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/dblockConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/dblockConfigVersion.cmake"
              cmake/FindSOCI.cmake cmake/FindMySQLConnectorCpp.cmake
        DESTINATION ${_cmake_dir} COMPONENT dev)

# dblock.pc. A shared libdblock.so carries its drivers itself, so they are private to it; a static
# libdblock.a needs them on the consumer's link line, so they are public there and a plain
# `pkg-config --libs dblock` links either kind.
set(_pc_requires sqlite3)
set(_pc_libs "-lsoci_sqlite3 -lsoci_core")
if(DBLOCK_WITH_POSTGRES)
  string(APPEND _pc_requires " libpq")
endif()
if(DBLOCK_WITH_MYSQL)
  string(APPEND _pc_libs " -lmysqlcppconn")
endif()
string(APPEND _pc_libs " -pthread")
if(BUILD_SHARED_LIBS)
  set(DBLOCK_PC_REQUIRES "")
  set(DBLOCK_PC_LIBS "")
  set(DBLOCK_PC_REQUIRES_PRIVATE "fmt ${_pc_requires}")
  set(DBLOCK_PC_LIBS_PRIVATE "${_pc_libs}")
else()
  set(DBLOCK_PC_REQUIRES "fmt ${_pc_requires}")
  set(DBLOCK_PC_LIBS "${_pc_libs}")
  set(DBLOCK_PC_REQUIRES_PRIVATE "")
  set(DBLOCK_PC_LIBS_PRIVATE "")
endif()
file(RELATIVE_PATH DBLOCK_PC_PREFIX_FROM_PCDIR "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" DBLOCK_PC_PREFIX_FROM_PCDIR "${DBLOCK_PC_PREFIX_FROM_PCDIR}")
configure_file(cmake/dblock.pc.in "${CMAKE_CURRENT_BINARY_DIR}/dblock.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/dblock.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The Prometheus adapter (dblock::prometheus), when this build has it: an export set of its own, so
# find_package(dblock) works without prometheus-cpp and dblock::prometheus appears only where
# prometheus-cpp is installed too (dblockConfig.cmake looks for it quietly).
if(TARGET dblock_prometheus)
  set_target_properties(dblock_prometheus PROPERTIES EXPORT_NAME prometheus)
  target_include_directories(dblock_prometheus PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  install(TARGETS dblock_prometheus EXPORT dblockPrometheusTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev NAMELINK_COMPONENT dev)
  install(FILES include/dblock/prometheus.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dblock COMPONENT dev)
  install(EXPORT dblockPrometheusTargets NAMESPACE dblock:: DESTINATION ${_cmake_dir} COMPONENT dev)
endif()

# The test kit (dblock::testing): the CMake package's component `testing` (an export set of its own:
# find_package(dblock COMPONENTS testing)), shipped in the dev install component (the -dev package).
if(TARGET dblock_testing)
  set_target_properties(dblock_testing PROPERTIES EXPORT_NAME testing)
  install(TARGETS dblock_testing EXPORT dblockTestingTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev NAMELINK_COMPONENT dev
          FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
  install(EXPORT dblockTestingTargets NAMESPACE dblock:: DESTINATION ${_cmake_dir} COMPONENT dev)
endif()

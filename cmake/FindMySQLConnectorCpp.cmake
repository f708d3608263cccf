# Debian's libmysqlcppconn-dev ships neither a CMake config nor a pkg-config file.
include(FindPackageHandleStandardArgs)
find_path(MySQLConnectorCpp_INCLUDE_DIR NAMES mysql_driver.h cppconn/driver.h)
find_library(MySQLConnectorCpp_LIBRARY NAMES mysqlcppconn)
if(MySQLConnectorCpp_INCLUDE_DIR AND EXISTS "${MySQLConnectorCpp_INCLUDE_DIR}/cppconn/version_info.h")
  file(STRINGS "${MySQLConnectorCpp_INCLUDE_DIR}/cppconn/version_info.h" _v REGEX "#define MYCPPCONN_DM_(MAJOR|MINOR|PATCH)_VERSION")
  string(REGEX REPLACE ".*MAJOR_VERSION[ \t]+([0-9]+).*MINOR_VERSION[ \t]+([0-9]+).*PATCH_VERSION[ \t]+([0-9]+).*"
         "\\1.\\2.\\3" MySQLConnectorCpp_VERSION "${_v}")
endif()
find_package(Boost QUIET)  # mysql_driver.h includes boost/scoped_ptr.hpp
find_package_handle_standard_args(MySQLConnectorCpp
  REQUIRED_VARS MySQLConnectorCpp_LIBRARY MySQLConnectorCpp_INCLUDE_DIR VERSION_VAR MySQLConnectorCpp_VERSION)
if(MySQLConnectorCpp_FOUND AND NOT TARGET MySQLConnectorCpp::MySQLConnectorCpp)
  add_library(MySQLConnectorCpp::MySQLConnectorCpp UNKNOWN IMPORTED)
  set_target_properties(MySQLConnectorCpp::MySQLConnectorCpp PROPERTIES
    IMPORTED_LOCATION "${MySQLConnectorCpp_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${MySQLConnectorCpp_INCLUDE_DIR}")
  if(TARGET Boost::headers)
    set_property(TARGET MySQLConnectorCpp::MySQLConnectorCpp APPEND PROPERTY INTERFACE_LINK_LIBRARIES Boost::headers)
  endif()
endif()
mark_as_advanced(MySQLConnectorCpp_INCLUDE_DIR MySQLConnectorCpp_LIBRARY)

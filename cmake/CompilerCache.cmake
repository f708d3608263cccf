# Compiles through ccache when it is installed (Debian's ccache; tools/deps.sh lists it), unless the
# configuration names a launcher of its own or sets DBLOCK_CCACHE=OFF. The cache is keyed so that a
# clone in another folder hits what this one stored: paths under the source tree are made relative
# (CCACHE_BASEDIR), the build directory is not hashed (CCACHE_NOHASHDIR: -g would otherwise hash it),
# and the tests compile in no absolute path of the checkout (tests/support/build_paths.hpp).
# Every preset shares the one cache, so presets that compile the same source with the same flags
# share the object. Where the cache lives is ccache's own setting (default ~/.cache/ccache).
option(DBLOCK_CCACHE "Compile through ccache when it is installed" ON)
if(DBLOCK_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(DBLOCK_CCACHE_PROGRAM ccache)
  if(DBLOCK_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
        CCACHE_NOHASHDIR=true ${DBLOCK_CCACHE_PROGRAM})
  endif()
endif()

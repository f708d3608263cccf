# Links with mold when it is installed (Debian's mold; tools/deps.sh lists it), unless the
# configuration sets DBLOCK_MOLD=OFF or already names a linker with -fuse-ld, and only where dblock
# is the top-level project (a parent project chooses its own linker). With GNU ld, linking
# the sanitized test programs was most of the sanitized builds' time once ccache held the objects;
# the linker changes no object and no semantics, only the time a link takes.
option(DBLOCK_MOLD "Link with mold when it is installed" ON)
if(DBLOCK_MOLD AND PROJECT_IS_TOP_LEVEL AND NOT "${CMAKE_EXE_LINKER_FLAGS} ${CMAKE_SHARED_LINKER_FLAGS}" MATCHES "-fuse-ld=")
  find_program(DBLOCK_MOLD_PROGRAM mold)
  if(DBLOCK_MOLD_PROGRAM)
    include(CheckLinkerFlag)
    check_linker_flag(CXX -fuse-ld=mold DBLOCK_LINKER_ACCEPTS_MOLD)
    if(DBLOCK_LINKER_ACCEPTS_MOLD)
      add_link_options(-fuse-ld=mold)
    endif()
  endif()
endif()

#pragma once
// DBLOCK_EXPORT marks dblock's public interface. The library is compiled with hidden visibility,
// so a shared libdblock.so (BUILD_SHARED_LIBS=ON) exports what carries the mark and nothing of its
// internals; a static build is unaffected. Exception classes carry it so that a catch in the
// application matches what the library threw.

#define DBLOCK_EXPORT __attribute__((visibility("default")))
/// DBLOCK_HIDDEN keeps one member of an exported class out of the shared library's interface: a
/// private constructor that only the library calls and whose parameters are internal types.
#define DBLOCK_HIDDEN __attribute__((visibility("hidden")))

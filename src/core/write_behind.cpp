#include "core/write_behind.hpp"

namespace dblock::detail {

std::thread start_writer_thread(void (*run)(void*), void* self) { return std::thread(run, self); }

}  // namespace dblock::detail

#include "dblock/commands/command.hpp"

#include <dblock/migrate.hpp>

namespace dblock::cli {

std::shared_ptr<Store> open_ready_store(const Invocation& invocation, StoreOptions options) {
  options.logger = invocation.logger;
  auto store = Store::open(invocation.dsn, options);
  if (store->dialect() == "sqlite") (void)migrate(*store);
  return store;
}

std::shared_ptr<Store> open_checked_store(const Invocation& invocation) {
  auto store = open_ready_store(invocation);
  store->check_schema();
  return store;
}

}  // namespace dblock::cli

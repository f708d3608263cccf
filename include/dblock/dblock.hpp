#pragma once
#include <dblock/errors.hpp>
#include <dblock/lock.hpp>
#include <dblock/lock_manager.hpp>
#include <dblock/migrate.hpp>
#include <dblock/options.hpp>
#include <dblock/reaper.hpp>
#include <dblock/store.hpp>

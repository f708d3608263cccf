#pragma once
// sysexits(3) codes, so that scripts can tell "busy" from "misconfigured" from "server down".

namespace dblock::cli {

inline constexpr int kUsage = 64;         // EX_USAGE: bad name, duration, DSN syntax, option
inline constexpr int kUnavailable = 69;   // EX_UNAVAILABLE: server unreachable or login refused
inline constexpr int kSoftware = 70;      // EX_SOFTWARE: other errors; the lease was lost while CMD ran
inline constexpr int kOsError = 71;       // EX_OSERR: e.g. the reaper cannot listen on its address
inline constexpr int kTempFail = 75;      // EX_TEMPFAIL: the lock was not acquired in time
inline constexpr int kNoPermission = 77;  // EX_NOPERM: the database role lacks a right dblock needs
inline constexpr int kConfig = 78;        // EX_CONFIG: dblock's schema is missing, older or newer

}  // namespace dblock::cli

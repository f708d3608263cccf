#include "dblock/status_page.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <dblock/text.hpp>

namespace dblock::cli {

namespace {

std::string_view state_name(LockState state) {
  switch (state) {
    case LockState::revoked:
      return "revoked";
    case LockState::min_hold:
      return "min-hold";
    case LockState::delayed:
      return "delayed";
    default:
      return "held";
  }
}

/// What an operator reads in the LEASE column: the lease left, or why the row is still there.
std::string lease_text(const LockInfo& row) {
  if (row.remaining.count() <= 0) return "expired (not reaped yet)";
  return format_duration(row.remaining);
}

double seconds(std::chrono::milliseconds value) { return static_cast<double>(value.count()) / 1000.0; }

/// The fair queue's waiters, in arrival order per name, or why there are none to show.
std::string render_waiters_html(const StatusSnapshot& status) {
  if (status.waiters.empty())
    return "<p id=\"no-waiters\" class=\"dim\">No waiter in the fair queue. Waiters of managers without "
           "<code>fair_queue</code> wait in their own processes (see each application's dblock_waiting_acquires "
           "gauge) and are not shown here.</p>\n";
  std::string out =
      "<h2>waiting</h2>\n<table id=\"waiters\"><thead><tr><th>name</th><th>kind</th><th>position</th>"
      "<th>owner</th><th>waited</th></tr></thead><tbody>\n";
  for (auto& waiter : status.waiters)
    out += fmt::format(
        "<tr><td class=\"name\">{}</td><td>{}</td><td class=\"num position\">{}</td><td class=\"owner\">{}</td>"
        "<td class=\"num\">{}</td></tr>\n",
        html_escape(waiter.name), holder_kind_name(waiter.kind), waiter.position, html_escape(waiter.owner),
        format_duration(waiter.waited));
  out += "</tbody></table>\n";
  if (status.waiters_truncated)
    out += fmt::format("<p id=\"waiters-truncated\">showing the first {} waiters by name</p>\n", status.waiters.size());
  return out;
}

}  // namespace

std::string html_escape(std::string_view text) {
  // terminal_safe first: a name's control or bidirectional characters must not reorder or hide
  // what is shown, here as on a terminal.
  auto visible = terminal_safe(text);
  std::string out;
  out.reserve(visible.size());
  for (char c : visible) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_status_html(const StatusSnapshot& status, std::string_view store, int refresh_seconds) {
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  if (refresh_seconds > 0) out += fmt::format("<meta http-equiv=\"refresh\" content=\"{}\">\n", refresh_seconds);
  out +=
      "<title>dblock locks</title>\n<style>"
      "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}th{background:#eee}"
      "td.num{text-align:right}.bad{color:#a00}.dim{color:#666}"
      "</style></head><body>\n<h1>dblock locks</h1>\n";
  out += fmt::format("<p id=\"store\">store: <code>{}</code> &middot; read at {:%Y-%m-%d %H:%M:%S} UTC</p>\n",
                     html_escape(store), std::chrono::time_point_cast<std::chrono::seconds>(status.read_at));
  if (!status.error.empty())
    out += fmt::format("<p id=\"error\" class=\"bad\">the lock table could not be read: {}</p>\n",
                       html_escape(status.error));
  if (status.census) {
    auto& census = *status.census;
    out += fmt::format(
        "<p id=\"census\">held: <b id=\"held\">{}</b> &middot; expired, not reaped: <b id=\"expired\">{}</b> &middot; "
        "oldest grant: <b id=\"oldest\">{}</b> &middot; queued: <b id=\"queued\">{}</b></p>\n",
        census.held, census.expired, census.oldest_held_age.count() > 0 ? format_duration(census.oldest_held_age) : "-",
        census.queued);
  }
  if (status.rows.empty() && status.error.empty()) {
    out += "<p id=\"empty\">no locks</p>\n";
  } else if (!status.rows.empty()) {
    out +=
        "<table id=\"locks\"><thead><tr><th>name</th><th>kind</th><th>state</th><th>owner</th><th>token</th>"
        "<th>count</th><th>lease left</th><th>held for</th><th>note</th></tr></thead><tbody>\n";
    for (auto& row : status.rows)
      out += fmt::format(
          "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td class=\"owner\">{}</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td><td class=\"num{}\">{}</td><td class=\"num\">{}</td><td class=\"note\">{}</td>"
          "</tr>\n",
          html_escape(row.name), holder_kind_name(row.kind), state_name(row.state), html_escape(row.owner), row.token,
          row.count, row.remaining.count() <= 0 ? " bad" : "", lease_text(row), format_duration(row.held_for),
          html_escape(row.note));
    out += "</tbody></table>\n";
    if (status.truncated)
      out += fmt::format(
          "<p id=\"truncated\">showing the first {} rows by name; the census above counts them all "
          "(--status-rows shows more)</p>\n",
          status.rows.size());
  }
  out += render_waiters_html(status);
  out +=
      "<p class=\"dim\">Read-only. JSON: <a href=\"/status.json\">/status.json</a> &middot; "
      "<a href=\"/metrics\">/metrics</a> &middot; <a href=\"/healthz\">/healthz</a></p>\n</body></html>\n";
  return out;
}

std::string render_status_json(const StatusSnapshot& status, std::string_view store) {
  std::string out =
      fmt::format("{{\"store\":{},\"read_at_unix_ms\":{},", json_string(store),
                  std::chrono::duration_cast<std::chrono::milliseconds>(status.read_at.time_since_epoch()).count());
  if (!status.error.empty()) out += fmt::format("\"error\":{},", json_string(status.error));
  if (status.census)
    out += fmt::format("\"census\":{{\"held\":{},\"expired\":{},\"oldest_held_age_seconds\":{},\"queued\":{}}},",
                       status.census->held, status.census->expired, seconds(status.census->oldest_held_age),
                       status.census->queued);
  else
    out += "\"census\":null,";
  // The fair queue's waiters; those of managers without it wait in their own processes, unlisted.
  out += fmt::format("\"waiters_truncated\":{},\"waiters\":[", status.waiters_truncated);
  for (std::size_t i = 0; i < status.waiters.size(); ++i) {
    auto& waiter = status.waiters[i];
    out += fmt::format("{}{{\"name\":{},\"kind\":\"{}\",\"owner\":{},\"position\":{},\"waited_ms\":{}}}",
                       i == 0 ? "" : ",", json_string(waiter.name), holder_kind_name(waiter.kind),
                       json_string(waiter.owner), waiter.position, waiter.waited.count());
  }
  out += fmt::format("],\"truncated\":{},\"locks\":[", status.truncated);
  for (std::size_t i = 0; i < status.rows.size(); ++i) {
    auto& row = status.rows[i];
    out += fmt::format(
        "{}{{\"name\":{},\"kind\":\"{}\",\"state\":\"{}\",\"owner\":{},\"token\":{},\"count\":{},"
        "\"lease_left_ms\":{},\"expired\":{},\"held_for_ms\":{},\"note\":{}}}",
        i == 0 ? "" : ",", json_string(row.name), holder_kind_name(row.kind), state_name(row.state),
        json_string(row.owner), row.token, row.count, row.remaining.count(), row.remaining.count() <= 0,
        row.held_for.count(), json_string(row.note));
  }
  out += "]}\n";
  return out;
}

}  // namespace dblock::cli

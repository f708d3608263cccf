// PgConnection's pipeline: several statements sent before any reply is read, one round trip in all
// (a statement not prepared yet on this session is prepared in the same pipeline).
#include <algorithm>
#include <chrono>
#include <string_view>
#include <vector>

#include "backends/postgres/pg_connection.hpp"

namespace dblock::detail {

std::vector<PgResult> PgConnection::exec_pipelined(std::span<const Pipelined> statements, std::size_t& failed_at) {
  constexpr std::string_view what = "statement failed";
  auto* conn = conn_.get();
  if (PQenterPipelineMode(conn) == 0) fail(nullptr, what);
  // Whatever is thrown below: pipeline mode ends here, or the session is never reused.
  struct Leave {
    PgConnection& self;
    ~Leave() {
      if (PQpipelineStatus(self.conn_.get()) != PQ_PIPELINE_OFF && PQexitPipelineMode(self.conn_.get()) == 0)
        self.abandoned_ = true;
    }
  } leave{*this};
  bool unnamed = mode_->behind_transaction_pooler();
  // Each reply of the pipeline, in order: the statement it answers (a prepare answers its statement too).
  std::vector<std::size_t> answers;
  std::vector<std::size_t> preparing;  // ids of the statements prepared in this pipeline
  bool sent = true;
  for (std::size_t i = 0; i < statements.size() && sent; ++i) {
    const auto& step = statements[i];
    auto count = static_cast<int>(step.values.size());
    if (step.statement == nullptr || unnamed) {
      const char* sql = step.statement == nullptr ? step.text : step.statement->sql.c_str();
      sent = PQsendQueryParams(conn, sql, count, nullptr, step.values.data(), nullptr, nullptr, 0) != 0;
    } else {
      const auto& statement = *step.statement;
      if (statement.id >= prepared_.size()) prepared_.resize(statement.id + 1, false);
      if (!prepared_[statement.id] && std::find(preparing.begin(), preparing.end(), statement.id) == preparing.end()) {
        sent = PQsendPrepare(conn, statement.name.c_str(), statement.sql.c_str(), 0, nullptr) != 0;
        preparing.push_back(statement.id);
        answers.push_back(i);
      }
      sent = sent &&
             PQsendQueryPrepared(conn, statement.name.c_str(), count, step.values.data(), nullptr, nullptr, 0) != 0;
    }
    answers.push_back(i);
  }
  if (!sent || PQpipelineSync(conn) == 0) fail(nullptr, what);

  auto deadline = std::min(std::chrono::steady_clock::now() + statement_timeout_, reply_by_);
  auto allowed = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  std::vector<PgResult> results(statements.size());
  PgResult first_error;
  std::size_t reply = 0;
  // Every reply up to the sync must be read before pipeline mode can end: after an error the rest
  // come back PGRES_PIPELINE_ABORTED.
  while (true) {
    PgResult result(next_result(deadline, allowed, what));
    if (!result) {
      if (++reply > answers.size() || PQstatus(conn) == CONNECTION_BAD) fail(nullptr, what);
      continue;
    }
    auto status = PQresultStatus(result.get());
    if (status == PGRES_PIPELINE_SYNC) break;
    if (reply >= answers.size()) fail(nullptr, what);
    if (status == PGRES_PIPELINE_ABORTED) continue;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      if (!first_error) failed_at = answers[reply], first_error = std::move(result);
      continue;
    }
    bool is_prepare = reply + 1 < answers.size() && answers[reply + 1] == answers[reply];
    if (is_prepare)
      prepared_[statements[answers[reply]].statement->id] = true;
    else
      results[answers[reply]] = std::move(result);
  }
  if (PQexitPipelineMode(conn) == 0) fail(nullptr, what);
  if (first_error) {
    try {
      fail(first_error.get(), what);
    } catch (const DatabaseError& e) {
      if (statements[failed_at].statement == nullptr || unnamed) throw;
      on_statement_error(e);
    }
  }
  return results;
}

}  // namespace dblock::detail

// The migrator's: the history table, its advisory lock, the schema, and the rights and catalog
// checks.
#include "backends/postgres/pg_sql.hpp"

namespace dblock::detail {

PgMigrationSql::PgMigrationSql(const PgSqlText& fill) {
  schema_version = fill(R"(SELECT coalesce(max(version), 0) FROM "{schema}"."{prefix}schema_history" WHERE success)");
  history_table = fill(R"(
CREATE TABLE IF NOT EXISTS "{schema}"."{prefix}schema_history" (
  version      integer PRIMARY KEY,
  name         text NOT NULL,
  checksum     text NOT NULL,
  applied_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  applied_by   text NOT NULL,
  execution_ms bigint NOT NULL,
  success      boolean NOT NULL
))");
  history =
      fill(R"(SELECT version, name, checksum, success FROM "{schema}"."{prefix}schema_history" ORDER BY version)");
  record = fill(
      R"(INSERT INTO "{schema}"."{prefix}schema_history" (version, name, checksum, applied_by, execution_ms, success)
VALUES ($1::integer, $2, $3, $4, $5::bigint, true))");
  forget = fill(R"(DELETE FROM "{schema}"."{prefix}schema_history" WHERE version = $1::integer)");
  migration_lock = fill("SELECT pg_try_advisory_lock({key}, hashtext('dblock:migrate'))");
  migration_xact_lock = fill("SELECT pg_try_advisory_xact_lock({key}, hashtext('dblock:migrate'))");
  migration_lock_blocking = fill("SELECT pg_advisory_lock({key}, hashtext('dblock:migrate'))");
  migration_unlock = fill("SELECT pg_advisory_unlock({key}, hashtext('dblock:migrate'))");
  create_schema = fill(R"(CREATE SCHEMA IF NOT EXISTS "{schema}")");
  // USAGE and CREATE on the schema (CREATE on the database when the schema is to be created),
  // SELECT and INSERT on an existing history, ownership of what is re-defined ($2).
  migration_rights = fill(R"(
SELECT format('CREATE on database %I (to create schema %I)', current_database(), $1::text)
WHERE NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AND NOT has_database_privilege(current_database(), 'CREATE')
UNION ALL
SELECT format('%s on schema %I', p.priv, n.nspname) FROM pg_namespace n, unnest(ARRAY['USAGE', 'CREATE']) p(priv)
WHERE n.nspname = $1 AND NOT has_schema_privilege(n.oid, p.priv)
UNION ALL
SELECT format('%s on table %I.%I', p.priv, n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, unnest(ARRAY['SELECT', 'INSERT']) p(priv)
WHERE n.nspname = $1 AND c.relname = '{prefix}schema_history' AND NOT has_table_privilege(c.oid, p.priv)
UNION ALL
SELECT format('ownership of %s %I.%I (owned by %I)', CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' ELSE 'table' END,
              n.nspname, c.relname, pg_get_userbyid(c.relowner))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relname <> '{prefix}schema_history'
  AND NOT pg_has_role(c.relowner, 'USAGE')
UNION ALL
SELECT format('ownership of function %I.%I (owned by %I)', n.nspname, p.proname, pg_get_userbyid(p.proowner))
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = ANY ($2::text[]) AND NOT pg_has_role(p.proowner, 'USAGE'))");
  catalog = fill(R"(
SELECT c.relname,
       CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index'
                      WHEN 'I' THEN 'index' WHEN 'v' THEN 'view' WHEN 'm' THEN 'view' ELSE 'other' END,
       coalesce((SELECT t.relname FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid WHERE x.indexrelid = c.oid), ''),
       CASE WHEN c.relkind IN ('i', 'I') THEN
         coalesce((SELECT string_agg(a.attname, ',' ORDER BY k.position) FROM pg_index x
                   CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, position)
                   JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
                   WHERE x.indexrelid = c.oid), '')
       ELSE coalesce((SELECT string_agg(a.attname, ',' ORDER BY a.attnum) FROM pg_attribute a
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')), '') END,
       '',
       coalesce((SELECT string_agg(format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                                   || coalesce((SELECT ' collate ' || l.collname FROM pg_collation l
                                                WHERE l.oid = a.attcollation AND l.collname <> 'default'), ''),
                                   ',' ORDER BY a.attnum) FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[])
UNION ALL
SELECT p.proname, CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'f' THEN 'function' ELSE 'other' END, '', '', p.prosrc, ''
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = ANY ($2::text[])
UNION ALL
SELECT t.typname, 'other', '', '', '', '' FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = $1 AND t.typname = ANY ($2::text[]) AND t.typtype IN ('c', 'd', 'e', 'r')
  AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
ORDER BY 2, 1)");
}

}  // namespace dblock::detail

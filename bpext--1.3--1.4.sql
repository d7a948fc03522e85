/* bpext--1.3--1.4.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION bpext UPDATE TO '1.4'" to load this file. \quit

-- 1.4: per database, the time spent reading pages from the tier and from
-- data files beside their counts, as Aurora shows orcache_blk_read_time
-- beside storage_blk_read_time, and the data-file reads that completed
-- out of bpext's sight and were not timed (18's asynchronous I/O).  The
-- new columns come last.
CREATE FUNCTION bpext_database_stats_1_4(
    OUT database_id oid,
    OUT tier_reads bigint,
    OUT data_file_reads bigint,
    OUT tier_hit_ratio double precision,
    OUT tier_read_time double precision,
    OUT data_file_read_time double precision,
    OUT data_file_reads_not_timed bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_database_stats_1_4'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE OR REPLACE VIEW bpext_database_stats AS
    SELECT s.database_id, d.datname, s.tier_reads, s.data_file_reads,
           s.tier_hit_ratio, s.tier_read_time, s.data_file_read_time,
           s.data_file_reads_not_timed
      FROM bpext_database_stats_1_4() s
      LEFT JOIN pg_database d ON d.oid = s.database_id;

REVOKE ALL ON FUNCTION bpext_database_stats_1_4() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_database_stats_1_4() TO pg_monitor;

-- EXPLAIN (ANALYZE, TIER) as a function, for the majors where extensions
-- cannot add EXPLAIN options (15 to 17; it works on 18 and 19 too): runs
-- the statement, as EXPLAIN ANALYZE does, and returns a row per plan node
-- in EXPLAIN's order, the top node (the plan's totals) first.  Anyone may
-- call it: the statement runs with the caller's privileges.
CREATE FUNCTION bpext_explain_tier(
    query text,
    OUT node integer,
    OUT parent_node integer,
    OUT level integer,
    OUT node_type text,
    OUT relation regclass,
    OUT tier_hits bigint,
    OUT data_file_reads bigint,
    OUT tier_read_time double precision,
    OUT data_file_read_time double precision,
    OUT data_file_reads_not_timed bigint,
    OUT shared_read bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_explain_tier_1_4'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- 1.4: bpext_configuration shows the shared memory per tier page exactly,
-- to two decimals (whole bytes showed 32 for 32.6).  The column's type
-- changes, so the view is made anew.
CREATE FUNCTION bpext_configuration_1_4(
    OUT path text,
    OUT file_id integer,
    OUT state integer,
    OUT state_description text,
    OUT current_size_in_kb bigint,
    OUT max_size_in_kb bigint,
    OUT allocated_pages bigint,
    OUT map_bytes_per_page numeric,
    OUT last_error text,
    OUT last_error_time timestamptz,
    OUT start_mode text,
    OUT cold_start_reason text,
    OUT pages_reused bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_configuration_1_4'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

DROP VIEW bpext_configuration;
CREATE VIEW bpext_configuration AS
    SELECT * FROM bpext_configuration_1_4();

REVOKE ALL ON FUNCTION bpext_configuration_1_4() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_configuration_1_4() TO pg_monitor;
REVOKE ALL ON bpext_configuration FROM PUBLIC;
GRANT SELECT ON bpext_configuration TO pg_monitor;

-- 1.4: bpext_stats says whether the tier paused admission because it
-- cannot help (bpext.adaptive_admission), how often it paused and resumed
-- it, and what it saw: the tier hits whose data-file page it looked for in
-- the kernel's page cache, and those it found there.
CREATE FUNCTION bpext_stats_1_4(
    OUT extension_page_reads bigint,
    OUT extension_page_writes bigint,
    OUT extension_page_evictions bigint,
    OUT extension_outstanding_io bigint,
    OUT extension_page_unreferenced_time double precision,
    OUT extension_free_pages bigint,
    OUT extension_allocated_pages bigint,
    OUT extension_in_use_percent double precision,
    OUT lookups bigint,
    OUT hits bigint,
    OUT misses bigint,
    OUT hit_ratio double precision,
    OUT data_file_reads bigint,
    OUT data_file_read_calls bigint,
    OUT read_time_ms double precision,
    OUT write_time_ms double precision,
    OUT bytes_read bigint,
    OUT bytes_written bigint,
    OUT invalidations bigint,
    OUT publish_races bigint,
    OUT admission_skips bigint,
    OUT pages_pushed bigint,
    OUT pages_dual_written bigint,
    OUT pages_read_admitted bigint,
    OUT pages_prewarmed bigint,
    OUT crc_failures bigint,
    OUT io_errors bigint,
    OUT stats_reset timestamptz,
    OUT clean_evictions bigint,
    OUT missed_pushes bigint,
    OUT admission_paused boolean,
    OUT admission_pauses bigint,
    OUT admission_resumes bigint,
    OUT hits_probed bigint,
    OUT hits_probed_cached bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_stats_1_4'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE OR REPLACE VIEW bpext_stats AS
    SELECT * FROM bpext_stats_1_4();

REVOKE ALL ON FUNCTION bpext_stats_1_4() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_stats_1_4() TO pg_monitor;

-- The 1.0 to 1.3 functions of both stay callable: a query written against
-- them keeps working after the update.

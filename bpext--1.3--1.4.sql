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

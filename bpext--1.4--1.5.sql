/* bpext--1.4--1.5.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION bpext UPDATE TO '1.5'" to load this file. \quit

-- 1.5: bpext_stats shows the tier reads handed to the reader helpers at
-- this moment: those no helper has taken yet, and those the helpers have at
-- the device (with bpext.tier_read_depth above 1, each helper keeps several
-- there at once).  The new columns come last.
CREATE FUNCTION bpext_stats_1_5(
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
    OUT hits_probed_cached bigint,
    OUT reads_waiting_for_helper bigint,
    OUT reads_at_device bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_stats_1_5'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE OR REPLACE VIEW bpext_stats AS
    SELECT * FROM bpext_stats_1_5();

REVOKE ALL ON FUNCTION bpext_stats_1_5() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_stats_1_5() TO pg_monitor;

-- The 1.0 to 1.4 functions stay callable: a query written against them
-- keeps working after the update.

/* bpext--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION bpext" to load this file. \quit

-- The tier's configuration, one row per tier file, as SQL Server's
-- sys.dm_os_buffer_pool_extension_configuration.
CREATE FUNCTION bpext_configuration_1_0(
    OUT path text,
    OUT file_id integer,
    OUT state integer,
    OUT state_description text,
    OUT current_size_in_kb bigint,
    OUT max_size_in_kb bigint,
    OUT allocated_pages bigint,
    OUT map_bytes_per_page integer,
    OUT last_error text,
    OUT last_error_time timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_configuration_1_0'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_configuration AS
    SELECT * FROM bpext_configuration_1_0();

-- Counters, named after SQL Server's Buffer Manager "Extension ..."
-- performance counters where one exists.
CREATE FUNCTION bpext_stats_1_0(
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
    OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_stats_1_0'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_stats AS
    SELECT * FROM bpext_stats_1_0();

CREATE FUNCTION bpext_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'bpext_stats_reset'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- Per database: tier reads beside data-file reads (Aurora's
-- orcache_blks_hit beside storage_blks_read).
CREATE FUNCTION bpext_database_stats_1_0(
    OUT database_id oid,
    OUT tier_reads bigint,
    OUT data_file_reads bigint,
    OUT tier_hit_ratio double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_database_stats_1_0'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_database_stats AS
    SELECT s.database_id, d.datname, s.tier_reads, s.data_file_reads,
           s.tier_hit_ratio
      FROM bpext_database_stats_1_0() s
      LEFT JOIN pg_database d ON d.oid = s.database_id;

-- One row per page in shared buffers or in the tier, as SQL Server's
-- sys.dm_os_buffer_descriptors, with pg_buffercache's columns after.
CREATE FUNCTION bpext_buffer_descriptors(
    with_contents boolean,
    OUT database_id oid,
    OUT file_id integer,
    OUT page_id bigint,
    OUT page_level integer,
    OUT allocation_unit_id oid,
    OUT page_type text,
    OUT row_count integer,
    OUT free_space_in_bytes integer,
    OUT is_modified boolean,
    OUT numa_node integer,
    OUT read_microsec bigint,
    OUT is_in_bpool_extension boolean,
    OUT bufferid bigint,
    OUT reltablespace oid,
    OUT reldatabase oid,
    OUT relfilenode oid,
    OUT relforknumber smallint,
    OUT relblocknumber bigint,
    OUT usagecount smallint,
    OUT pinning_backends integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_buffer_descriptors_1_0'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_buffer_descriptors AS
    SELECT * FROM bpext_buffer_descriptors(false);

-- Pages of each relation in RAM and on SSD.  The relation is named only
-- for the current database and shared catalogs.
CREATE VIEW bpext_relation_buffers AS
    SELECT reldatabase AS database_id, reltablespace, relfilenode,
           relforknumber,
           CASE WHEN reldatabase IN (0, (SELECT oid FROM pg_database
                                         WHERE datname = current_database()))
                THEN pg_filenode_relation(
                         CASE WHEN reltablespace = (SELECT dattablespace
                                                      FROM pg_database
                                                     WHERE datname = current_database())
                              THEN 0 ELSE reltablespace END,
                         relfilenode)
           END AS relation,
           count(*) FILTER (WHERE NOT is_in_bpool_extension) AS ram_pages,
           count(*) FILTER (WHERE is_in_bpool_extension) AS ssd_pages,
           count(*) FILTER (WHERE is_modified) AS dirty_pages
      FROM bpext_buffer_descriptors
     GROUP BY reldatabase, reltablespace, relfilenode, relforknumber;

-- Load a relation fork from its data file straight into the tier.
CREATE FUNCTION bpext_prewarm(relation regclass, fork text DEFAULT 'main')
RETURNS bigint
AS 'MODULE_PATHNAME', 'bpext_prewarm'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- DBCC DROPCLEANBUFFERS: shared buffers and the tier, for cold-cache tests.
CREATE FUNCTION bpext_drop_clean_buffers()
RETURNS bigint
AS 'MODULE_PATHNAME', 'bpext_drop_clean_buffers'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- DBCC FLUSH: write a database's dirty buffers.
CREATE FUNCTION bpext_flush(database name DEFAULT current_database())
RETURNS bigint
AS 'MODULE_PATHNAME', 'bpext_flush'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- Recent buffer and tier scans: SQL Server's buffer_pool_scan_complete.
CREATE FUNCTION bpext_scan_history_1_0(
    OUT scan_id bigint,
    OUT command text,
    OUT operation text,
    OUT database_id oid,
    OUT scanned_buffers bigint,
    OUT total_iterated_buffers bigint,
    OUT parallel_tasks integer,
    OUT elapsed_ms double precision,
    OUT wait_ms double precision,
    OUT finished_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_scan_history_1_0'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_scan_history AS
    SELECT * FROM bpext_scan_history_1_0();

-- ALTER SERVER CONFIGURATION SET BUFFER POOL EXTENSION ON / OFF, online.
CREATE FUNCTION bpext_enable(path text DEFAULT NULL, size text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'bpext_enable'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION bpext_disable()
RETURNS text
AS 'MODULE_PATHNAME', 'bpext_disable'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION bpext_resize(size text)
RETURNS text
AS 'MODULE_PATHNAME', 'bpext_resize'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- Monitoring is for pg_monitor; changing the tier is for superusers.
REVOKE ALL ON FUNCTION bpext_configuration_1_0() FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_stats_1_0() FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_database_stats_1_0() FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_buffer_descriptors(boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_scan_history_1_0() FROM PUBLIC;
REVOKE ALL ON bpext_configuration, bpext_stats, bpext_database_stats,
    bpext_buffer_descriptors, bpext_relation_buffers, bpext_scan_history
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_configuration_1_0() TO pg_monitor;
GRANT EXECUTE ON FUNCTION bpext_stats_1_0() TO pg_monitor;
GRANT EXECUTE ON FUNCTION bpext_database_stats_1_0() TO pg_monitor;
GRANT EXECUTE ON FUNCTION bpext_buffer_descriptors(boolean) TO pg_monitor;
GRANT EXECUTE ON FUNCTION bpext_scan_history_1_0() TO pg_monitor;
GRANT SELECT ON bpext_configuration, bpext_stats, bpext_database_stats,
    bpext_buffer_descriptors, bpext_relation_buffers, bpext_scan_history
    TO pg_monitor;

REVOKE ALL ON FUNCTION bpext_stats_reset() FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_enable(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_disable() FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_resize(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_drop_clean_buffers() FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_flush(name) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_flush(name) TO pg_checkpoint;

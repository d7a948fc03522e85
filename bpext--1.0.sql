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

-- Cumulative counters, named after SQL Server's Buffer Manager
-- "Extension ..." performance counters where one exists.
CREATE FUNCTION bpext_stats_1_0(
    OUT extension_page_reads bigint,
    OUT extension_page_writes bigint,
    OUT extension_page_evictions bigint,
    OUT extension_allocated_pages bigint,
    OUT extension_free_pages bigint,
    OUT lookups bigint,
    OUT hits bigint,
    OUT misses bigint,
    OUT invalidations bigint,
    OUT publish_races bigint,
    OUT admission_skips bigint,
    OUT pages_pushed bigint,
    OUT pages_dual_written bigint,
    OUT pages_read_admitted bigint,
    OUT pages_prewarmed bigint,
    OUT crc_failures bigint,
    OUT io_errors bigint,
    OUT read_time_ms double precision,
    OUT write_time_ms double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_stats_1_0'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_stats AS
    SELECT * FROM bpext_stats_1_0();

-- Load a relation fork from its data file straight into the tier.
CREATE FUNCTION bpext_prewarm(relation regclass, fork text DEFAULT 'main')
RETURNS bigint
AS 'MODULE_PATHNAME', 'bpext_prewarm'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

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
REVOKE ALL ON bpext_configuration FROM PUBLIC;
REVOKE ALL ON bpext_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_configuration_1_0() TO pg_monitor;
GRANT EXECUTE ON FUNCTION bpext_stats_1_0() TO pg_monitor;
GRANT SELECT ON bpext_configuration TO pg_monitor;
GRANT SELECT ON bpext_stats TO pg_monitor;

REVOKE ALL ON FUNCTION bpext_enable(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_disable() FROM PUBLIC;
REVOKE ALL ON FUNCTION bpext_resize(text) FROM PUBLIC;

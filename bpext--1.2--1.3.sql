/* bpext--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION bpext UPDATE TO '1.3'" to load this file. \quit

-- 1.3: pages per relation fork in RAM and on SSD, counted inside the scan
-- workers rather than listed page by page (a 1 TB tier holds 134M pages).
CREATE FUNCTION bpext_buffer_summary_1_3(
    OUT database_id oid,
    OUT reltablespace oid,
    OUT relfilenode oid,
    OUT relforknumber smallint,
    OUT ram_pages bigint,
    OUT ssd_pages bigint,
    OUT dirty_pages bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_buffer_summary_1_3'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

-- One row per relation fork; the relation is named only for the current
-- database and shared catalogs, as in bpext_relation_buffers.
CREATE VIEW bpext_buffer_summary AS
    SELECT s.database_id, d.datname, s.reltablespace, s.relfilenode,
           s.relforknumber,
           CASE WHEN s.database_id IN (0, (SELECT oid FROM pg_database
                                           WHERE datname = current_database()))
                THEN pg_filenode_relation(
                         CASE WHEN s.reltablespace = (SELECT dattablespace
                                                        FROM pg_database
                                                       WHERE datname = current_database())
                              THEN 0 ELSE s.reltablespace END,
                         s.relfilenode)
           END AS relation,
           s.ram_pages, s.ssd_pages, s.dirty_pages
      FROM bpext_buffer_summary_1_3() s
      LEFT JOIN pg_database d ON d.oid = s.database_id;

-- One row per database (0: shared catalogs).
CREATE VIEW bpext_database_buffers AS
    SELECT s.database_id, d.datname,
           sum(s.ram_pages)::bigint AS ram_pages,
           sum(s.ssd_pages)::bigint AS ssd_pages,
           sum(s.dirty_pages)::bigint AS dirty_pages
      FROM bpext_buffer_summary_1_3() s
      LEFT JOIN pg_database d ON d.oid = s.database_id
     GROUP BY s.database_id, d.datname;

-- bpext_relation_buffers keeps its columns and counts them the fast way.
CREATE OR REPLACE VIEW bpext_relation_buffers AS
    SELECT database_id, reltablespace, relfilenode, relforknumber,
           relation, ram_pages, ssd_pages, dirty_pages
      FROM bpext_buffer_summary;

REVOKE ALL ON FUNCTION bpext_buffer_summary_1_3() FROM PUBLIC;
REVOKE ALL ON bpext_buffer_summary, bpext_database_buffers FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_buffer_summary_1_3() TO pg_monitor;
GRANT SELECT ON bpext_buffer_summary, bpext_database_buffers TO pg_monitor;

-- Long operations under way (prewarm, warm load, resize, flush, drop
-- clean buffers, sweeps), as pg_stat_progress_* shows PostgreSQL's.
CREATE FUNCTION bpext_progress_1_3(
    OUT pid integer,
    OUT operation text,
    OUT command text,
    OUT database_id oid,
    OUT relid oid,
    OUT pages_done bigint,
    OUT pages_total bigint,
    OUT pages_per_second double precision,
    OUT parallel_workers integer,
    OUT started_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_progress_1_3'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_progress AS
    SELECT p.pid, p.operation, p.command, p.database_id, d.datname,
           p.relid, p.pages_done, p.pages_total, p.pages_per_second,
           p.parallel_workers, p.started_at
      FROM bpext_progress_1_3() p
      LEFT JOIN pg_database d ON d.oid = p.database_id;

REVOKE ALL ON FUNCTION bpext_progress_1_3() FROM PUBLIC;
REVOKE ALL ON bpext_progress FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_progress_1_3() TO pg_monitor;
GRANT SELECT ON bpext_progress TO pg_monitor;

-- The tier sizing advisor (src/sizing.c): the estimated tier hit ratio at
-- every size, from a sampled reuse-distance histogram of the shared-buffer
-- misses since the last bpext_sizing_reset() (or server start).  It works
-- with the tier off.
CREATE FUNCTION bpext_sizing_1_3(
    OUT tier_pages bigint,
    OUT tier_bytes bigint,
    OUT hit_ratio double precision,
    OUT reads_saved_per_second double precision,
    OUT map_bytes bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_sizing_1_3'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_sizing AS
    SELECT tier_pages, tier_bytes, pg_size_pretty(tier_bytes) AS tier_size,
           hit_ratio, reads_saved_per_second, map_bytes
      FROM bpext_sizing_1_3();

CREATE FUNCTION bpext_sizing_window_1_3(
    OUT since timestamptz,
    OUT seconds double precision,
    OUT misses double precision,
    OUT misses_per_second double precision,
    OUT first_reference_ratio double precision,
    OUT pages_touched bigint,
    OUT sample_rate double precision,
    OUT sampled_misses bigint,
    OUT sampled_pages bigint,
    OUT sample_capacity bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_sizing_window_1_3'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW bpext_sizing_window AS
    SELECT * FROM bpext_sizing_window_1_3();

CREATE FUNCTION bpext_sizing_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'bpext_sizing_reset'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION bpext_sizing_1_3(), bpext_sizing_window_1_3() FROM PUBLIC;
REVOKE ALL ON bpext_sizing, bpext_sizing_window FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_sizing_1_3(), bpext_sizing_window_1_3() TO pg_monitor;
GRANT SELECT ON bpext_sizing, bpext_sizing_window TO pg_monitor;
-- Resetting is for superusers, as bpext_stats_reset().
REVOKE ALL ON FUNCTION bpext_sizing_reset() FROM PUBLIC;

/* bpext--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION bpext UPDATE TO '1.1'" to load this file. \quit

-- 1.1: bpext_configuration says how the tier started (warm restart).
CREATE FUNCTION bpext_configuration_1_1(
    OUT path text,
    OUT file_id integer,
    OUT state integer,
    OUT state_description text,
    OUT current_size_in_kb bigint,
    OUT max_size_in_kb bigint,
    OUT allocated_pages bigint,
    OUT map_bytes_per_page integer,
    OUT last_error text,
    OUT last_error_time timestamptz,
    OUT start_mode text,
    OUT cold_start_reason text,
    OUT pages_reused bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'bpext_configuration_1_1'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE OR REPLACE VIEW bpext_configuration AS
    SELECT * FROM bpext_configuration_1_1();

REVOKE ALL ON FUNCTION bpext_configuration_1_1() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpext_configuration_1_1() TO pg_monitor;

-- The 1.0 function stays callable: a view or query written against 1.0
-- keeps working after the update.

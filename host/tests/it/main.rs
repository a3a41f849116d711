//! chitin's integration tests, one binary with a module per area.
//!
//! One binary, not one per file: each binary links the whole node (wasmtime
//! above all), so 32 of them spent most of a cold test run linking. Every
//! test still runs in a process of its own under cargo-nextest
//! (`.config/nextest.toml`), whose test groups keep the multi-process
//! clusters from running beside each other.

mod support;

mod api_bad_input;
mod app_fence;
mod chaos_plants;
mod chaos_service;
mod chaos_short;
mod client_cases;
mod container_image;
mod coord_fail_open;
mod coord_redis;
mod coord_scripts;
mod db_failover;
mod deploy_files;
mod function_length;
mod journal_requests;
mod lease_checks;
mod lease_store;
mod listener_limits;
mod module_graph;
mod node_cluster;
mod node_liveness;
mod node_standalone;
mod ops_http;
mod ownership_cluster;
mod packages;
mod plugin_examples;
mod policy_cache;
mod policy_cluster;
mod policy_diff;
mod policy_fixtures;
mod policy_sandbox;
mod policy_versions;
mod python_client;
mod redis_ha;
mod rollout_cluster;
mod rust_client;
mod security;
mod settings_load;
mod tls;
mod topology_cli;
mod traces;
mod typescript_client;
mod upgrade_mixed;
mod upgrade_versions;

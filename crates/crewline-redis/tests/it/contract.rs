//! The whole `TaskStore` contract, run against a real `redis-server` (one per test).

use crate::common;

crewline_remote::store_contract_tests!(common::RedisBackend::open());

//! crewline's runnable examples, cross-crate tests and benchmarks live in this package's
//! `examples/`, `tests/` and `benches/` folders; the library is in `crates/`.

//! crewline against the recorded Python reference (`smallestai.atoms.crew` 5.14.0), scenario
//! by scenario: the fixtures in `tests/fixtures/reference/` (see `reference/README.md`) are
//! replayed over real WebSockets against crewline mirrors of the reference crews, with the
//! Rust mock LLM playing the recorded LLM scripts. crewline's frames, step outcomes, closes,
//! HTTP answers and LLM request bodies must equal the recording, except for the named rules
//! of `parity/rules.rs` (listed with their reasons in PARITY.md).
//!
//! Every scenario runs on crewline. One is adapted: `handshake_timeout` runs with a 500 ms
//! handshake timeout instead of 10 s (rule `short_handshake_timeout`); its outcome is
//! compared.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use crate::parity;

/// Declares one test per scenario, and a test that no fixture is left without one.
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                parity::check(stringify!($name)).await;
            }
        )*

        #[test]
        fn every_fixture_has_a_test() {
            let tested = [$(stringify!($name)),*];
            for name in parity::fixture_names() {
                assert!(tested.contains(&name.as_str()), "fixture {name} has no parity test");
            }
        }
    };
}

// The list lives once, in `parity::with_scenarios!`.
with_scenarios!(scenarios);

#[test]
fn every_rule_is_documented_in_parity_md() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/PARITY.md"))
        .expect("PARITY.md");
    for rule in parity::rules::RULES {
        assert!(
            doc.contains(&format!("`{}`", rule.name)),
            "PARITY.md does not list rule {}",
            rule.name
        );
    }
}

//! The tool-call assembler on arbitrary fragment sequences: never panics, gives one call per
//! call it started, with unique ids and never-empty arguments.
#![no_main]

use std::collections::HashSet;

use arbitrary::Arbitrary;
use crewline_llm::{ToolCallAssembler, ToolCallDelta};
use libfuzzer_sys::fuzz_target;

/// One fragment; small indexes and short strings so fragments collide often.
#[derive(Debug, Arbitrary)]
struct Fragment {
    index: Option<u8>,
    id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
}

fuzz_target!(|fragments: Vec<Fragment>| {
    let mut assembler = ToolCallAssembler::new();
    for fragment in fragments {
        assembler.push(ToolCallDelta {
            index: fragment.index.map(u32::from),
            id: fragment.id,
            name: fragment.name,
            arguments: fragment.arguments,
        });
    }
    let started = assembler.len();
    let calls = assembler.finish();
    assert_eq!(calls.len(), started);
    let ids: HashSet<&str> = calls.iter().map(|call| call.id.as_str()).collect();
    assert_eq!(ids.len(), calls.len(), "ids are unique: {calls:?}");
    assert!(
        calls
            .iter()
            .all(|call| !call.id.is_empty() && !call.arguments.trim().is_empty())
    );
});

//! The tool-call assembler on arbitrary fragment sequences, under small limits: never panics;
//! within the limits it gives one call per call it started, with unique ids and never-empty
//! arguments; past one it fails, keeps nothing and fails again on every later fragment.
#![no_main]

use std::collections::HashSet;

use arbitrary::Arbitrary;
use crewline_llm::{AnswerLimits, ToolCallAssembler, ToolCallDelta};
use libfuzzer_sys::fuzz_target;

/// Small limits, so short inputs reach them.
const LIMITS: AnswerLimits = AnswerLimits {
    max_answer_bytes: 2048,
    max_tool_calls: 16,
    max_call_bytes: 512,
};

/// One fragment; small indexes and short strings so fragments collide often.
#[derive(Debug, Arbitrary)]
struct Fragment {
    index: Option<u8>,
    id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
}

fuzz_target!(|fragments: Vec<Fragment>| {
    let mut assembler = ToolCallAssembler::with_limits(LIMITS);
    let mut failed = false;
    for fragment in fragments {
        let pushed = assembler.push(ToolCallDelta {
            index: fragment.index.map(u32::from),
            id: fragment.id,
            name: fragment.name,
            arguments: fragment.arguments,
        });
        assert!(!failed || pushed.is_err(), "a failed answer stays failed");
        if pushed.is_err() {
            failed = true;
            assert!(
                assembler.is_empty() && assembler.bytes() == 0,
                "nothing is kept"
            );
        }
        assert!(assembler.len() <= LIMITS.max_tool_calls);
        assert!(assembler.bytes() <= LIMITS.max_answer_bytes);
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

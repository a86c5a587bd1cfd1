//! Patterns from scenario files, compiled with bounds: a file is input.

use regex::{Regex, RegexBuilder};

/// The most memory a compiled pattern may take: a scenario file is input, and a pattern can
/// be written to blow up when compiled.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a scenario's pattern, bounded; the error says what is wrong with it.
pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|error| format!("bad regex {pattern:?}: {error}"))
}

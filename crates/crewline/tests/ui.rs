//! Compile errors of `#[function_tool]` and `#[tools]`: each case in `tests/ui/` pins the
//! message and the span the user sees. Regenerate with `TRYBUILD=overwrite`, then review.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}

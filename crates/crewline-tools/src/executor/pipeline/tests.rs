use super::*;

#[test]
fn fresh_ids_are_unique_call_ids() {
    let (a, b) = (fresh_call_id(), fresh_call_id());
    assert!(a.starts_with("call_") && a != b, "{a} {b}");
}

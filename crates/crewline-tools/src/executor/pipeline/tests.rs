use super::*;

#[test]
fn fresh_ids_are_unique_call_ids() {
    let (a, b) = (fresh_call_id(), fresh_call_id());
    assert!(a.starts_with("call_") && a != b, "{a} {b}");
}

#[test]
fn result_sizes_count_strings_as_is_and_other_values_as_json() {
    assert_eq!(result_size(&Value::from("héllo"), 10), Some(6));
    assert_eq!(result_size(&Value::from("héllo"), 5), None);
    assert_eq!(
        result_size(&serde_json::json!({"a": [1, 2]}), 100),
        Some(11)
    );
    assert_eq!(result_size(&serde_json::json!({"a": [1, 2]}), 10), None);
}

#[test]
fn durations_read_naturally() {
    assert_eq!(human_duration(Duration::from_secs(5)), "5s");
    assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
}

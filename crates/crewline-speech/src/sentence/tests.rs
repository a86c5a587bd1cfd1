use serde_json::Value;

use super::*;

/// Feeds `text` whole, then flushes; every sentence, in order.
fn split_with(mut aggregator: SentenceAggregator, text: &str) -> Vec<String> {
    let mut sentences = aggregator.push(text);
    sentences.extend(aggregator.flush());
    sentences
}

/// The cases of `cases.json`, shared with the playground's JavaScript port (its browser test
/// runs every one of them in Chromium), by the name of the test that runs them.
const CASES: &str = include_str!("cases.json");

/// The groups of `cases.json`, each named for the test below that runs it.
const GROUPS: [&str; 19] = [
    "plain_sentences_split_at_their_end_marks",
    "a_sentence_is_yielded_as_soon_as_the_next_one_begins",
    "titles_and_latin_abbreviations_do_not_end_a_sentence",
    "initialisms_end_a_sentence_only_before_a_new_one",
    "maybe_final_abbreviations_look_at_the_next_word",
    "initials_stay_with_the_name",
    "numbers_decimals_and_money_are_not_sentence_ends",
    "number_abbreviations_continue_before_a_number",
    "ellipses_end_a_sentence_only_before_a_new_one",
    "quotes_and_brackets_after_the_mark_stay_with_the_sentence",
    "runs_of_marks_end_one_sentence",
    "line_breaks_end_sentences_and_list_markers_do_not",
    "non_latin_end_marks_split_without_spaces",
    "short_fragments_merge_with_the_next_sentence",
    "a_long_run_on_sentence_is_cut_at_a_clause_mark_past_the_maximum",
    "a_chunk_boundary_inside_an_abbreviation_changes_nothing",
    "discard_drops_the_pending_text_and_the_aggregator_starts_over",
    "flush_yields_the_rest_even_when_short_or_unfinished",
    "every_group_of_cases_json_is_run_by_a_test",
];

fn groups() -> serde_json::Map<String, Value> {
    let cases: Value = serde_json::from_str(CASES).expect("cases.json is JSON");
    cases["groups"]
        .as_object()
        .expect("cases.json has an object `groups`")
        .clone()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("expected a list of strings, got {value}"))
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

/// The aggregator a case asks for: `min_chars` (default 8) and `max_chars` (default none).
fn aggregator_for(case: &Value) -> SentenceAggregator {
    let min = case
        .get("min_chars")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_MIN_CHARS, |n| usize::try_from(n).expect("small"));
    let max = case
        .get("max_chars")
        .and_then(Value::as_u64)
        .map(|n| usize::try_from(n).expect("small"));
    SentenceAggregator::with_min_chars(min).max_chars(max)
}

/// Runs every case of the group `name` of `cases.json`.
fn run_group(name: &str) {
    let groups = groups();
    let cases = groups[name]
        .as_array()
        .unwrap_or_else(|| panic!("cases.json has no group {name}"));
    assert!(!cases.is_empty(), "group {name} is empty");
    for case in cases {
        let note = case.get("note").and_then(Value::as_str).unwrap_or("");
        if let Some(text) = case.get("text").and_then(Value::as_str) {
            let expected = strings(&case["sentences"]);
            assert_eq!(
                split_with(aggregator_for(case), text),
                expected,
                "{name}, whole: {text:?} {note}"
            );
            assert_eq!(
                split_by_char_with(aggregator_for(case), text),
                expected,
                "{name}, char by char: {text:?} {note}"
            );
        }
        if let Some(steps) = case.get("steps").and_then(Value::as_array) {
            run_steps(aggregator_for(case), steps, name);
        }
    }
}

/// Runs the steps of a case in order, checking what each returns.
fn run_steps(mut aggregator: SentenceAggregator, steps: &[Value], name: &str) {
    for (i, step) in steps.iter().enumerate() {
        let note = step.get("note").and_then(Value::as_str).unwrap_or("");
        if let Some(chunk) = step.get("push").and_then(Value::as_str) {
            assert_eq!(
                aggregator.push(chunk),
                strings(&step["yields"]),
                "{name}, step {i}: push {chunk:?} {note}"
            );
        } else if let Some(flushed) = step.get("flush") {
            assert_eq!(
                aggregator.flush().as_deref(),
                flushed.as_str(),
                "{name}, step {i}: flush {note}"
            );
        } else if let Some(dropped) = step.get("discard").and_then(Value::as_str) {
            assert_eq!(aggregator.discard(), dropped, "{name}, step {i}: discard");
        } else if let Some(pending) = step.get("pending").and_then(Value::as_str) {
            assert_eq!(aggregator.pending(), pending, "{name}, step {i}: pending");
        } else {
            panic!("{name}, step {i}: unknown step {step}");
        }
    }
}

/// Feeds `text` one character at a time: the smallest chunks a stream can have.
fn split_by_char_with(mut aggregator: SentenceAggregator, text: &str) -> Vec<String> {
    let mut sentences = Vec::new();
    for c in text.chars() {
        sentences.extend(aggregator.push(c.encode_utf8(&mut [0; 4])));
    }
    sentences.extend(aggregator.flush());
    sentences
}

#[test]
fn every_group_of_cases_json_is_run_by_a_test() {
    let groups = groups();
    for name in groups.keys() {
        assert!(GROUPS.contains(&name.as_str()), "no test runs group {name}");
    }
    assert_eq!(groups.len(), GROUPS.len() - 1, "every test has its group");
}

#[test]
fn plain_sentences_split_at_their_end_marks() {
    run_group("plain_sentences_split_at_their_end_marks");
}

#[test]
fn a_sentence_is_yielded_as_soon_as_the_next_one_begins() {
    run_group("a_sentence_is_yielded_as_soon_as_the_next_one_begins");
}

#[test]
fn titles_and_latin_abbreviations_do_not_end_a_sentence() {
    run_group("titles_and_latin_abbreviations_do_not_end_a_sentence");
}

#[test]
fn initialisms_end_a_sentence_only_before_a_new_one() {
    run_group("initialisms_end_a_sentence_only_before_a_new_one");
}

#[test]
fn maybe_final_abbreviations_look_at_the_next_word() {
    run_group("maybe_final_abbreviations_look_at_the_next_word");
}

#[test]
fn initials_stay_with_the_name() {
    run_group("initials_stay_with_the_name");
}

#[test]
fn numbers_decimals_and_money_are_not_sentence_ends() {
    run_group("numbers_decimals_and_money_are_not_sentence_ends");
}

#[test]
fn number_abbreviations_continue_before_a_number() {
    run_group("number_abbreviations_continue_before_a_number");
}

#[test]
fn ellipses_end_a_sentence_only_before_a_new_one() {
    run_group("ellipses_end_a_sentence_only_before_a_new_one");
}

#[test]
fn quotes_and_brackets_after_the_mark_stay_with_the_sentence() {
    run_group("quotes_and_brackets_after_the_mark_stay_with_the_sentence");
}

#[test]
fn runs_of_marks_end_one_sentence() {
    run_group("runs_of_marks_end_one_sentence");
}

#[test]
fn line_breaks_end_sentences_and_list_markers_do_not() {
    run_group("line_breaks_end_sentences_and_list_markers_do_not");
}

#[test]
fn non_latin_end_marks_split_without_spaces() {
    run_group("non_latin_end_marks_split_without_spaces");
}

#[test]
fn short_fragments_merge_with_the_next_sentence() {
    run_group("short_fragments_merge_with_the_next_sentence");
}

#[test]
fn a_long_run_on_sentence_is_cut_at_a_clause_mark_past_the_maximum() {
    run_group("a_long_run_on_sentence_is_cut_at_a_clause_mark_past_the_maximum");
}

#[test]
fn a_chunk_boundary_inside_an_abbreviation_changes_nothing() {
    run_group("a_chunk_boundary_inside_an_abbreviation_changes_nothing");
}

#[test]
fn discard_drops_the_pending_text_and_the_aggregator_starts_over() {
    run_group("discard_drops_the_pending_text_and_the_aggregator_starts_over");
}

#[test]
fn flush_yields_the_rest_even_when_short_or_unfinished() {
    run_group("flush_yields_the_rest_even_when_short_or_unfinished");
}

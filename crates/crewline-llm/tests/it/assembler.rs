//! Tests of the tool-call assembler: one case per rule, then property tests over every way a
//! server may split the same calls into deltas.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;

use crewline_core::ToolCall;
use crewline_llm::{ToolCallAssembler, ToolCallDelta};
use proptest::{prelude::*, sample::Index};

fn assemble(deltas: impl IntoIterator<Item = ToolCallDelta>) -> Vec<ToolCall> {
    let mut assembler = ToolCallAssembler::new();
    assembler.push_all(deltas).expect("within the limits");
    assembler.finish()
}

fn no_index() -> ToolCallDelta {
    ToolCallDelta::default()
}

// ---------------------------------------------------------------------------------------------
// One case per rule
// ---------------------------------------------------------------------------------------------

#[test]
fn openai_shape_assembles_one_call() {
    let calls = assemble([
        ToolCallDelta::at(0)
            .id("call_abc")
            .name("get_weather")
            .arguments(""),
        ToolCallDelta::at(0).arguments("{\"loc"),
        ToolCallDelta::at(0).arguments("ation\": \"Pa"),
        ToolCallDelta::at(0).arguments("ris\"}"),
    ]);
    assert_eq!(
        calls,
        vec![ToolCall::new(
            "call_abc",
            "get_weather",
            r#"{"location": "Paris"}"#
        )]
    );
}

#[test]
fn several_calls_in_one_chunk_and_interleaved_fragments() {
    let mut assembler = ToolCallAssembler::new();
    // Both calls open in the same chunk (the Python reference would lose the second).
    assembler
        .push_all([
            ToolCallDelta::at(0)
                .id("a")
                .name("lookup")
                .arguments("{\"q\":"),
            ToolCallDelta::at(1)
                .id("b")
                .name("book")
                .arguments("{\"day\":"),
        ])
        .expect("within the limits");
    assembler
        .push(ToolCallDelta::at(1).arguments("\"mon\"}"))
        .expect("within the limits");
    assembler
        .push(ToolCallDelta::at(0).arguments("\"x\"}"))
        .expect("within the limits");
    assert_eq!(assembler.len(), 2);
    assert_eq!(
        assembler.finish(),
        vec![
            ToolCall::new("a", "lookup", r#"{"q":"x"}"#),
            ToolCall::new("b", "book", r#"{"day":"mon"}"#),
        ]
    );
}

#[test]
fn indexes_may_start_above_zero_and_have_gaps() {
    let calls = assemble([
        ToolCallDelta::at(3).id("a").name("f"),
        ToolCallDelta::at(7).id("b").name("g"),
        ToolCallDelta::at(3).arguments("{}"),
        ToolCallDelta::at(7).arguments("{\"k\":1}"),
    ]);
    assert_eq!(
        calls,
        vec![
            ToolCall::new("a", "f", "{}"),
            ToolCall::new("b", "g", r#"{"k":1}"#),
        ]
    );
}

#[test]
fn output_follows_first_appearance_not_index_order() {
    let calls = assemble([
        ToolCallDelta::at(5).id("late_index").name("first"),
        ToolCallDelta::at(1).id("early_index").name("second"),
    ]);
    let names: Vec<_> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
}

#[test]
fn id_and_name_may_arrive_in_a_later_delta() {
    let calls = assemble([
        ToolCallDelta::at(0).arguments("{\"a\""),
        ToolCallDelta::at(0).name("f").arguments(":1"),
        ToolCallDelta::at(0).id("late").arguments("}"),
    ]);
    assert_eq!(calls, vec![ToolCall::new("late", "f", r#"{"a":1}"#)]);
}

#[test]
fn name_pieces_are_concatenated() {
    let calls = assemble([
        ToolCallDelta::at(0).id("a").name("get_"),
        ToolCallDelta::at(0).name("wea"),
        ToolCallDelta::at(0).name("ther"),
    ]);
    assert_eq!(calls[0].name, "get_weather");
}

#[test]
fn name_resent_on_every_delta_is_not_doubled() {
    let calls = assemble([
        ToolCallDelta::at(0)
            .id("a")
            .name("get_weather")
            .arguments("{"),
        ToolCallDelta::at(0)
            .id("a")
            .name("get_weather")
            .arguments("}"),
        ToolCallDelta::at(0).name("get_weather"),
    ]);
    assert_eq!(calls, vec![ToolCall::new("a", "get_weather", "{}")]);
}

#[test]
fn whole_name_resent_after_pieces_is_not_appended() {
    let calls = assemble([
        ToolCallDelta::at(0).id("a").name("get_"),
        ToolCallDelta::at(0).name("weather"),
        ToolCallDelta::at(0).name("get_weather"),
    ]);
    assert_eq!(calls[0].name, "get_weather");
}

#[test]
fn without_index_deltas_attach_by_id_and_new_ids_open_calls() {
    let calls = assemble([
        no_index().id("a").name("f").arguments("{\"x\":"),
        no_index().id("b").name("g").arguments("{\"y\":"),
        no_index().id("a").arguments("1}"),
        no_index().id("b").arguments("2}"),
    ]);
    assert_eq!(
        calls,
        vec![
            ToolCall::new("a", "f", r#"{"x":1}"#),
            ToolCall::new("b", "g", r#"{"y":2}"#),
        ]
    );
}

#[test]
fn without_index_or_id_deltas_continue_the_previous_call() {
    let calls = assemble([
        no_index().id("a").name("f").arguments("{\"x\":"),
        no_index().arguments("1}"),
        no_index().id("b").name("g"),
        no_index().arguments("{}"),
    ]);
    assert_eq!(
        calls,
        vec![
            ToolCall::new("a", "f", r#"{"x":1}"#),
            ToolCall::new("b", "g", "{}"),
        ]
    );
}

#[test]
fn without_index_or_id_the_first_delta_opens_a_call() {
    let calls = assemble([
        no_index().name("f").arguments("{\"x\""),
        no_index().arguments(":1}"),
    ]);
    assert_eq!(calls, vec![ToolCall::new("call_0", "f", r#"{"x":1}"#)]);
}

#[test]
fn index_zero_reused_with_distinct_ids_gives_separate_calls() {
    // Some compatible servers send every call with index 0.
    let calls = assemble([
        ToolCallDelta::at(0).id("a").name("f"),
        ToolCallDelta::at(0).arguments("{\"n\":1}"),
        ToolCallDelta::at(0).id("b").name("g"),
        ToolCallDelta::at(0).arguments("{\"n\":2}"),
    ]);
    assert_eq!(
        calls,
        vec![
            ToolCall::new("a", "f", r#"{"n":1}"#),
            ToolCall::new("b", "g", r#"{"n":2}"#),
        ]
    );
}

#[test]
fn whole_calls_at_one_index_without_ids_stay_separate_calls() {
    // A relay that sends each whole call at index 0 with an empty id (Gemini through new-api).
    let calls = assemble([
        ToolCallDelta::at(0)
            .id("")
            .name("get_weather")
            .arguments(r#"{"city":"Paris"}"#),
        ToolCallDelta::at(0)
            .id("")
            .name("get_weather")
            .arguments(r#"{"city":"Zürich"}"#),
        ToolCallDelta::at(0).name("get_time").arguments("{\"tz\":"),
        ToolCallDelta::at(0).arguments("\"CET\"}"),
    ]);
    assert_eq!(
        calls,
        vec![
            ToolCall::new("call_0", "get_weather", r#"{"city":"Paris"}"#),
            ToolCall::new("call_1", "get_weather", r#"{"city":"Zürich"}"#),
            ToolCall::new("call_2", "get_time", r#"{"tz":"CET"}"#),
        ]
    );
}

#[test]
fn a_resent_name_with_the_last_fragment_does_not_split_the_call() {
    let calls = assemble([
        ToolCallDelta::at(0).name("f").arguments(r#"{"a":"#),
        ToolCallDelta::at(0).name("f").arguments("1}"),
        ToolCallDelta::at(0).name("f").arguments(" "),
    ]);
    assert_eq!(calls, vec![ToolCall::new("call_0", "f", r#"{"a":1} "#)]);
}

#[test]
fn reused_index_with_a_known_id_goes_back_to_that_call() {
    let calls = assemble([
        ToolCallDelta::at(0).id("a").name("f").arguments("{\"n\":"),
        ToolCallDelta::at(0).id("b").name("g").arguments("{\"n\":"),
        ToolCallDelta::at(0).id("a").arguments("1}"),
        ToolCallDelta::at(0).id("b").arguments("2}"),
    ]);
    assert_eq!(
        calls,
        vec![
            ToolCall::new("a", "f", r#"{"n":1}"#),
            ToolCall::new("b", "g", r#"{"n":2}"#),
        ]
    );
}

#[test]
fn a_call_first_seen_without_index_keeps_its_fragments_once_indexed() {
    let calls = assemble([
        no_index().id("a").name("f").arguments("{"),
        ToolCallDelta::at(0).id("a").arguments("}"),
        ToolCallDelta::at(0).arguments(" "),
    ]);
    assert_eq!(calls, vec![ToolCall::new("a", "f", "{} ")]);
}

#[test]
fn missing_ids_are_synthesised_from_the_position() {
    let calls = assemble([
        ToolCallDelta::at(0).name("f"),
        ToolCallDelta::at(1).id("real").name("g"),
        ToolCallDelta::at(2).name("h"),
    ]);
    let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_0", "real", "call_2"]);
}

#[test]
fn synthesised_ids_never_collide_with_real_ones() {
    let calls = assemble([
        ToolCallDelta::at(0).id("call_1").name("f"),
        ToolCallDelta::at(1).name("g"),
        ToolCallDelta::at(2).id("call_1_1").name("h"),
    ]);
    let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids[0], "call_1");
    assert_eq!(ids[2], "call_1_1");
    assert!(!["call_1", "call_1_1"].contains(&ids[1]), "{ids:?}");
}

#[test]
fn repeated_real_ids_are_made_unique() {
    let calls = assemble([
        ToolCallDelta::at(0).id("dup").name("f"),
        ToolCallDelta::at(1).id("dup").name("g"),
    ]);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "dup");
    assert_ne!(calls[1].id, "dup");
    assert_eq!(calls[1].name, "g");
}

#[test]
fn empty_id_strings_count_as_absent() {
    let calls = assemble([
        ToolCallDelta::at(0).id("").name("f"),
        ToolCallDelta::at(0).id("").arguments("{}"),
        ToolCallDelta::at(0).id("x"),
    ]);
    assert_eq!(calls, vec![ToolCall::new("x", "f", "{}")]);
}

#[test]
fn empty_or_blank_arguments_become_an_empty_object() {
    let calls = assemble([
        ToolCallDelta::at(0).id("a").name("f").arguments(""),
        ToolCallDelta::at(1).id("b").name("g").arguments(" \n"),
        ToolCallDelta::at(2).id("c").name("h"),
    ]);
    assert!(calls.iter().all(|c| c.arguments == "{}"), "{calls:?}");
}

#[test]
fn arguments_are_kept_byte_for_byte() {
    let text = "{ \"city\" :\"Zürich 東京\",\n \"emoji\":\"🌧\\u00e9\" ,\"n\":1.50 }";
    let (head, tail) = text.split_at(text.find('東').unwrap());
    let calls = assemble([
        ToolCallDelta::at(0).id("a").name("f").arguments(head),
        ToolCallDelta::at(0).arguments(tail),
    ]);
    assert_eq!(calls[0].arguments, text);
}

#[test]
fn calls_without_a_name_are_kept_with_an_empty_name() {
    let calls = assemble([ToolCallDelta::at(0).id("a").arguments("{\"x\":1}")]);
    assert_eq!(calls, vec![ToolCall::new("a", "", r#"{"x":1}"#)]);
}

#[test]
fn empty_deltas_are_ignored() {
    let mut assembler = ToolCallAssembler::new();
    assembler
        .push(ToolCallDelta::at(0))
        .expect("within the limits");
    assembler
        .push(no_index().arguments(""))
        .expect("within the limits");
    assembler
        .push(no_index().name("").id(""))
        .expect("within the limits");
    assert!(assembler.is_empty());
    assert_eq!(assembler.len(), 0);
    assert_eq!(assembler.finish(), vec![]);
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// A tool name as models write them.
fn name_strategy() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,15}"
}

/// Argument text: JSON with arbitrary (often non-ASCII) strings, raw text, or nothing.
fn arguments_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        ("\\PC{0,24}", any::<i32>())
            .prop_map(|(s, n)| serde_json::json!({"q": s, "n": n}).to_string()),
        Just(r#"{"city":"Zürich","note":"東京 🌧 ünïcödé"}"#.to_owned()),
        "\\PC{0,40}",
        Just(String::new()),
    ]
}

/// The char boundaries of `text` (0 and len included).
fn boundaries(text: &str) -> Vec<usize> {
    text.char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect()
}

/// `text` cut into exactly `parts` pieces (some possibly empty) at char boundaries.
fn split_into(text: &str, parts: usize, cuts: &[Index]) -> Vec<String> {
    let bounds = boundaries(text);
    let mut points: Vec<usize> = cuts
        .iter()
        .take(parts.saturating_sub(1))
        .map(|c| bounds[c.index(bounds.len())])
        .collect();
    points.sort_unstable();
    let mut pieces = Vec::with_capacity(parts);
    let mut start = 0;
    for point in points {
        pieces.push(text[start..point].to_owned());
        start = point;
    }
    pieces.push(text[start..].to_owned());
    while pieces.len() < parts {
        pieces.push(String::new());
    }
    pieces
}

/// Whether sending these name pieces in order would hit the resend rule (a piece equal to the
/// whole name so far), which is ambiguous by nature and so not part of the property.
fn name_split_is_ambiguous(pieces: &[String]) -> bool {
    let mut so_far = String::new();
    for piece in pieces.iter().filter(|p| !p.is_empty()) {
        if *piece == so_far {
            return true;
        }
        so_far.push_str(piece);
    }
    false
}

/// How a call's name travels.
#[derive(Debug, Clone)]
enum NameMode {
    /// Whole, in one delta.
    Once(Index),
    /// Whole, in every delta from one on.
    Resent(Index),
    /// In pieces over the deltas.
    Pieces(Vec<Index>),
}

/// How a call's id travels.
#[derive(Debug, Clone)]
enum IdMode {
    /// No id: the assembler synthesises one.
    Missing,
    /// In one delta.
    Once(Index),
    /// In every delta from one on.
    Resent(Index),
}

/// One call, and how it is split into deltas.
#[derive(Debug, Clone)]
struct CallPlan {
    name: String,
    arguments: String,
    deltas: usize,
    argument_cuts: Vec<Index>,
    name_mode: NameMode,
    id_mode: IdMode,
    /// Whether empty argument pieces are sent as `Some("")` rather than `None`.
    empty_as_some: bool,
}

fn call_plan() -> impl Strategy<Value = CallPlan> {
    let name_mode = prop_oneof![
        any::<Index>().prop_map(NameMode::Once),
        any::<Index>().prop_map(NameMode::Resent),
        prop::collection::vec(any::<Index>(), 0..5).prop_map(NameMode::Pieces),
    ];
    let id_mode = prop_oneof![
        1 => Just(IdMode::Missing),
        3 => any::<Index>().prop_map(IdMode::Once),
        2 => any::<Index>().prop_map(IdMode::Resent),
    ];
    (
        name_strategy(),
        arguments_strategy(),
        1_usize..7,
        prop::collection::vec(any::<Index>(), 0..7),
        name_mode,
        id_mode,
        any::<bool>(),
    )
        .prop_map(
            |(name, arguments, deltas, argument_cuts, name_mode, id_mode, empty_as_some)| {
                CallPlan {
                    name,
                    arguments,
                    deltas,
                    argument_cuts,
                    name_mode,
                    id_mode,
                    empty_as_some,
                }
            },
        )
}

impl CallPlan {
    /// The real id of call `k` (ids look nothing like synthesised ones).
    fn real_id(&self, k: usize) -> Option<String> {
        match self.id_mode {
            IdMode::Missing => None,
            _ => Some(format!("toolu_{k}_x9")),
        }
    }

    /// This call's deltas in order, each with `index` (or none).
    fn to_deltas(&self, k: usize, index: Option<u32>) -> Vec<ToolCallDelta> {
        let n = self.deltas;
        let args = split_into(&self.arguments, n, &self.argument_cuts);
        let mut names: Vec<Option<String>> = vec![None; n];
        match &self.name_mode {
            NameMode::Once(at) => names[at.index(n)] = Some(self.name.clone()),
            NameMode::Resent(from) => {
                for slot in &mut names[from.index(n)..] {
                    *slot = Some(self.name.clone());
                }
            }
            NameMode::Pieces(cuts) => {
                let pieces = split_into(&self.name, n, cuts);
                if name_split_is_ambiguous(&pieces) {
                    names[0] = Some(self.name.clone());
                } else {
                    for (slot, piece) in names.iter_mut().zip(pieces) {
                        *slot = (!piece.is_empty()).then_some(piece);
                    }
                }
            }
        }
        let mut ids: Vec<Option<String>> = vec![None; n];
        match (&self.id_mode, self.real_id(k)) {
            (IdMode::Once(at), Some(id)) => ids[at.index(n)] = Some(id),
            (IdMode::Resent(from), Some(id)) => {
                for slot in &mut ids[from.index(n)..] {
                    *slot = Some(id.clone());
                }
            }
            _ => {}
        }
        args.into_iter()
            .zip(names)
            .zip(ids)
            .map(|((arguments, name), id)| ToolCallDelta {
                index,
                id,
                name,
                arguments: (self.empty_as_some || !arguments.is_empty()).then_some(arguments),
            })
            .collect()
    }
}

/// Whether a delta carries anything (empty ones are ignored and do not open a call).
fn has_content(delta: &ToolCallDelta) -> bool {
    [&delta.id, &delta.name, &delta.arguments]
        .iter()
        .any(|field| field.as_ref().is_some_and(|s| !s.is_empty()))
}

/// The call `plan` stands for, at output position `position`.
fn expected_call(plan: &CallPlan, k: usize, position: usize) -> ToolCall {
    let arguments = if plan.arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        plan.arguments.clone()
    };
    let id = plan
        .real_id(k)
        .unwrap_or_else(|| format!("call_{position}"));
    ToolCall::new(id, plan.name.clone(), arguments)
}

/// Groups a flat delta sequence into chunks of the given sizes (the rest in one last chunk).
fn chunked(deltas: Vec<ToolCallDelta>, sizes: &[usize]) -> Vec<Vec<ToolCallDelta>> {
    let mut rest = deltas.into_iter().peekable();
    let mut chunks = Vec::new();
    for &size in sizes {
        let chunk: Vec<_> = rest.by_ref().take(size).collect();
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
    }
    let last: Vec<_> = rest.collect();
    if !last.is_empty() {
        chunks.push(last);
    }
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Indexed deltas: any split, any interleaving, any chunking, sparse indexes from any start
    /// assemble to exactly the calls that were sent, in order of first appearance.
    #[test]
    fn indexed_deltas_assemble_to_the_calls_sent(
        plans in prop::collection::vec(call_plan(), 1..5),
        first_index in 0_u32..4,
        gaps in prop::collection::vec(1_u32..4, 4),
        schedule in prop::collection::vec(any::<Index>(), 0..64),
        chunk_sizes in prop::collection::vec(1_usize..4, 0..32),
    ) {
        // Per-call delta queues, each with its own (sparse) index.
        let mut index = first_index;
        let mut queues: Vec<std::collections::VecDeque<ToolCallDelta>> = Vec::new();
        for (k, plan) in plans.iter().enumerate() {
            queues.push(plan.to_deltas(k, Some(index)).into());
            index += gaps[k % gaps.len()];
        }
        // Interleave the queues following the schedule, keeping each call's own order.
        let mut flat = Vec::new();
        let mut tagged = Vec::new(); // (call, delta) for working out the expected order.
        let mut step = schedule.iter();
        while queues.iter().any(|q| !q.is_empty()) {
            let open: Vec<usize> = (0..queues.len()).filter(|&k| !queues[k].is_empty()).collect();
            let k = step.next().map_or(open[0], |i| open[i.index(open.len())]);
            if let Some(delta) = queues[k].pop_front() {
                tagged.push((k, delta.clone()));
                flat.push(delta);
            }
        }
        // Expected: calls in order of their first delta that carries something.
        let mut order: Vec<usize> = Vec::new();
        for (k, delta) in &tagged {
            if has_content(delta) && !order.contains(k) {
                order.push(*k);
            }
        }
        let expected: Vec<ToolCall> = order
            .iter()
            .enumerate()
            .map(|(position, &k)| expected_call(&plans[k], k, position))
            .collect();

        let mut assembler = ToolCallAssembler::new();
        for chunk in chunked(flat, &chunk_sizes) {
            assembler.push_all(chunk).expect("within the limits");
        }
        prop_assert_eq!(assembler.len(), expected.len());
        prop_assert_eq!(assembler.finish(), expected);
    }

    /// Deltas without an index, calls one after another: with the id on every delta, or only
    /// on each call's first delta (the rest continue the previous call).
    #[test]
    fn unindexed_sequential_deltas_assemble_to_the_calls_sent(
        plans in prop::collection::vec(call_plan(), 1..5),
        id_on_every_delta in any::<bool>(),
    ) {
        let mut flat = Vec::new();
        for (k, plan) in plans.iter().enumerate() {
            let id = format!("toolu_{k}_x9");
            for (j, mut delta) in plan.to_deltas(k, None).into_iter().enumerate() {
                delta.id = (id_on_every_delta || j == 0).then(|| id.clone());
                flat.push(delta);
            }
        }
        let expected: Vec<ToolCall> = plans
            .iter()
            .enumerate()
            .map(|(k, plan)| {
                let mut call = expected_call(plan, k, k);
                call.id = format!("toolu_{k}_x9");
                call
            })
            .collect();
        prop_assert_eq!(assemble(flat), expected);
    }

    /// Servers that send every call with index 0 but distinct ids (id on each call's first
    /// delta) still give one call per id.
    #[test]
    fn index_zero_for_every_call_with_distinct_ids(
        plans in prop::collection::vec(call_plan(), 1..5),
    ) {
        let mut flat = Vec::new();
        for (k, plan) in plans.iter().enumerate() {
            for (j, mut delta) in plan.to_deltas(k, Some(0)).into_iter().enumerate() {
                delta.id = (j == 0).then(|| format!("toolu_{k}_x9"));
                flat.push(delta);
            }
        }
        let calls = assemble(flat);
        prop_assert_eq!(calls.len(), plans.len());
        for (k, (call, plan)) in calls.iter().zip(&plans).enumerate() {
            let mut expected = expected_call(plan, k, k);
            expected.id = format!("toolu_{k}_x9");
            prop_assert_eq!(call, &expected);
        }
    }

    /// Arbitrary garbage never panics, and the output is always executable-shaped: unique ids,
    /// non-empty arguments, one call per call started.
    #[test]
    fn arbitrary_deltas_never_panic_and_give_unique_ids(
        deltas in prop::collection::vec(
            (
                prop::option::of(0_u32..4),
                prop::option::of(prop_oneof![Just(String::new()), "call_[0-3](_1)?", "[ab]"]),
                prop::option::of("[a-c]{0,3}"),
                prop::option::of("\\PC{0,6}"),
            )
                .prop_map(|(index, id, name, arguments)| ToolCallDelta { index, id, name, arguments }),
            0..40,
        ),
    ) {
        let mut assembler = ToolCallAssembler::new();
        assembler.push_all(deltas).expect("within the limits");
        let started = assembler.len();
        let calls = assembler.finish();
        prop_assert_eq!(calls.len(), started);
        let ids: HashSet<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        prop_assert_eq!(ids.len(), calls.len());
        prop_assert!(calls.iter().all(|c| !c.id.is_empty() && !c.arguments.trim().is_empty()));
    }
}

#[test]
fn an_answer_past_its_limits_fails_at_once_and_keeps_nothing() {
    use crewline_llm::{AnswerLimits, LlmError};

    let limits = AnswerLimits {
        max_answer_bytes: 1_000,
        max_tool_calls: 3,
        max_call_bytes: 100,
    };
    // One call more than the count: distinct indexes each open a call.
    let mut calls = ToolCallAssembler::with_limits(limits);
    for index in 0..3 {
        calls
            .push(ToolCallDelta::at(index).name("f"))
            .expect("within the limits");
    }
    let error = calls.push(ToolCallDelta::at(3).name("f"));
    assert!(matches!(
        error,
        Err(LlmError::TooManyToolCalls { limit: 3 })
    ));
    assert!(
        calls.is_empty() && calls.bytes() == 0,
        "the calls are let go"
    );
    // Every later delta gets the same error, even one for a call already held.
    assert!(matches!(
        calls.push(ToolCallDelta::at(0).arguments("{}")),
        Err(LlmError::TooManyToolCalls { .. })
    ));

    // One call's arguments in pieces: exactly at the limit passes, a byte over fails.
    let mut calls = ToolCallAssembler::with_limits(limits);
    calls
        .push(
            ToolCallDelta::at(0)
                .id("id")
                .name("f")
                .arguments("x".repeat(97)),
        )
        .expect("100 bytes");
    assert!(matches!(
        calls.push(ToolCallDelta::at(0).arguments("x")),
        Err(LlmError::TooLarge {
            what: "a tool call",
            limit: 100
        })
    ));

    // A name resent on every delta is not kept again, so it costs nothing.
    let mut calls = ToolCallAssembler::with_limits(limits);
    for _ in 0..200 {
        calls
            .push(ToolCallDelta::at(0).name("get_weather").arguments(""))
            .expect("resends are free");
    }
    assert_eq!(calls.bytes(), "get_weather".len());

    // Many calls each within their limit, together over the answer's.
    let mut calls = ToolCallAssembler::with_limits(AnswerLimits {
        max_tool_calls: 100,
        ..limits
    });
    let error = (0..100)
        .map(|index| calls.push(ToolCallDelta::at(index).arguments("y".repeat(90))))
        .find_map(Result::err);
    assert!(
        matches!(
            error,
            Some(LlmError::TooLarge {
                what: "the answer",
                limit: 1_000
            })
        ),
        "{error:?}"
    );
}

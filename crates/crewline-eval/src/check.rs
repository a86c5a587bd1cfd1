//! A scenario's expectations as a flat list of checks, each judged on every run (or, for the
//! p95 budgets, on all runs at once), with a message saying what was expected and what came.

use std::time::Duration;

use crewline_speech::sentence::SentenceAggregator;
use serde::Serialize;

use crate::{
    matcher,
    record::{CallRecord, ToolCallRecord, TurnRecord},
    scenario::{Budget, Expect, ReplyExpect, Scenario, ToolExpect},
};

/// The most characters of a tool's error quoted in a failure message.
const QUOTED_ERROR_CHARS: usize = 80;
/// The most characters of a reply quoted in a failure message.
const QUOTED_REPLY_CHARS: usize = 160;

/// Where an expectation applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// One turn (0-based).
    Turn(usize),
    /// The whole call: tools and hand-offs over all turns, replies and budgets in each.
    Call,
}

/// What a check tests.
#[derive(Debug, Clone)]
enum Kind {
    Completes,
    BargeInReached,
    Tool(ToolExpect),
    ToolOrder(Vec<String>),
    /// An `agent.log` expectation, matched as a tool call on the event's fields.
    Log(ToolExpect),
    Contains(String),
    NotContains(String),
    Regex(String),
    MaxSentences(u32),
    Language(String),
    FirstChunk(u64),
    TurnTime(u64),
    P95FirstChunk(u64),
    P95TurnTime(u64),
    ChunksAfterBargeIn(u32),
    EndCall(bool),
    Transfer(bool),
    TransferTo(String),
    Handoff(bool),
    AgentError(bool),
    Silent(bool),
    /// An LLM judge's rubric; `id` keys its verdicts in a run's record.
    Judge {
        id: usize,
        rubric: String,
        min_score: f64,
        /// Holds when the score is below `min_score` (a goal that must not be met).
        below: bool,
    },
}

/// One expectation of a scenario.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    /// The expectation in words, e.g. `turn 2: get_weather(location = "Paris") called`.
    pub(crate) name: String,
    scope: Scope,
    kind: Kind,
}

impl Check {
    fn new(scope: Scope, kind: Kind) -> Self {
        let name = match scope {
            Scope::Turn(turn) => format!("turn {}: {}", turn + 1, describe(&kind)),
            Scope::Call if kind.per_turn() => format!("every turn: {}", describe(&kind)),
            Scope::Call => format!("call: {}", describe(&kind)),
        };
        Self { name, scope, kind }
    }

    /// What the check is about.
    pub(crate) fn category(&self) -> CheckCategory {
        match self.kind {
            Kind::Completes => CheckCategory::Call,
            Kind::BargeInReached | Kind::ChunksAfterBargeIn(_) => CheckCategory::BargeIn,
            Kind::Tool(_) | Kind::ToolOrder(_) => CheckCategory::Tool,
            Kind::Log(_) => CheckCategory::Log,
            Kind::Contains(_)
            | Kind::NotContains(_)
            | Kind::Regex(_)
            | Kind::MaxSentences(_)
            | Kind::Language(_) => CheckCategory::Reply,
            Kind::FirstChunk(_)
            | Kind::TurnTime(_)
            | Kind::P95FirstChunk(_)
            | Kind::P95TurnTime(_) => CheckCategory::Latency,
            Kind::EndCall(_) | Kind::Transfer(_) | Kind::TransferTo(_) | Kind::Handoff(_) => {
                CheckCategory::Handoff
            }
            Kind::AgentError(_) => CheckCategory::Error,
            Kind::Judge { .. } => CheckCategory::Judge,
            Kind::Silent(_) => CheckCategory::Reply,
        }
    }

    /// The judge's question when the check is a judge's: its id, its rubric, and the turn it
    /// grades (`None`: the whole call).
    pub(crate) fn judge_question(&self) -> Option<(usize, &str, Option<usize>)> {
        match (&self.kind, self.scope) {
            (Kind::Judge { id, rubric, .. }, Scope::Turn(turn)) => Some((*id, rubric, Some(turn))),
            (Kind::Judge { id, rubric, .. }, Scope::Call) => Some((*id, rubric, None)),
            _ => None,
        }
    }

    /// Whether the run reached what the check looks at (else it fails without a look).
    pub(crate) fn reached(&self, call: &CallRecord) -> bool {
        match self.scope {
            Scope::Turn(turn) => call.not_reached(Some(turn)).is_none(),
            Scope::Call => call.not_reached(None).is_none(),
        }
    }

    /// Whether the check holds over all runs at once rather than in each run.
    pub(crate) fn over_runs(&self) -> bool {
        matches!(self.kind, Kind::P95FirstChunk(_) | Kind::P95TurnTime(_))
    }

    /// Judges one run: `Err` says what was expected and what came.
    pub(crate) fn judge(&self, call: &CallRecord) -> Result<(), String> {
        if let Kind::Completes = self.kind {
            return match &call.stopped {
                None => Ok(()),
                Some(_) => Err(call.not_reached(None).unwrap_or_default()),
            };
        }
        let turns: Vec<(usize, &TurnRecord)> = match self.scope {
            Scope::Turn(turn) => {
                if let Some(why) = call.not_reached(Some(turn)) {
                    return Err(why);
                }
                call.turns
                    .get(turn)
                    .map(|t| (turn, t))
                    .into_iter()
                    .collect()
            }
            Scope::Call => {
                if let Some(why) = call.not_reached(None) {
                    return Err(why);
                }
                call.turns.iter().enumerate().collect()
            }
        };
        if let Kind::Judge {
            id,
            min_score,
            below,
            ..
        } = &self.kind
        {
            return match call.verdicts.get(id) {
                Some(Ok(verdict)) if (verdict.score + f64::EPSILON >= *min_score) != *below => {
                    Ok(())
                }
                Some(Ok(verdict)) => Err(format!(
                    "expected a judge's score {} {min_score}; it scored {}: {}",
                    if *below { "below" } else { "of at least" },
                    verdict.score,
                    verdict.reason
                )),
                Some(Err(why)) => Err(why.clone()),
                None => Err("the judge was not asked".to_owned()),
            };
        }
        if self.kind.per_turn() {
            for (index, turn) in turns {
                // What every reply must have, a silence lacks; what no reply may say, the
                // crew must not say during a silence either.
                if self.scope == Scope::Call && turn.silence && self.kind.needs_a_reply(turn) {
                    continue;
                }
                self.kind
                    .judge_turn(turn)
                    .map_err(|message| match self.scope {
                        Scope::Call => format!("turn {}: {message}", index + 1),
                        Scope::Turn(_) => message,
                    })?;
            }
            Ok(())
        } else {
            self.kind.judge_calls(turns.iter().map(|(_, turn)| *turn))
        }
    }

    /// Judges all runs at once (the p95 budgets).
    pub(crate) fn judge_over(&self, calls: &[CallRecord]) -> Result<(), String> {
        let turns = match self.scope {
            Scope::Turn(turn) => vec![turn],
            // A silence has no reply to time.
            Scope::Call => (0..calls.iter().map(|c| c.turns.len()).max().unwrap_or(0))
                .filter(|&turn| {
                    !calls
                        .iter()
                        .any(|c| c.turns.get(turn).is_some_and(|t| t.silence))
                })
                .collect(),
        };
        for turn in turns {
            let (what, budget, times): (&str, u64, Vec<Duration>) = match self.kind {
                Kind::P95FirstChunk(budget) => (
                    "first chunk",
                    budget,
                    calls
                        .iter()
                        .filter_map(|c| c.turns.get(turn)?.first_chunk)
                        .collect(),
                ),
                Kind::P95TurnTime(budget) => (
                    "turn time",
                    budget,
                    calls
                        .iter()
                        .filter_map(|c| c.turns.get(turn)?.turn_time)
                        .collect(),
                ),
                _ => return Ok(()),
            };
            let Some(p95) = p95(times.clone()) else {
                return Err(format!(
                    "turn {}: expected a p95 {what} within {budget} ms; no run measured one",
                    turn + 1
                ));
            };
            if p95 > Duration::from_millis(budget) {
                return Err(format!(
                    "turn {}: expected a p95 {what} within {budget} ms; came {} ms over {} runs",
                    turn + 1,
                    p95.as_millis(),
                    times.len()
                ));
            }
        }
        Ok(())
    }
}

/// The nearest-rank 95th percentile.
pub(crate) fn p95(mut times: Vec<Duration>) -> Option<Duration> {
    if times.is_empty() {
        return None;
    }
    times.sort_unstable();
    let rank = (times.len() * 95).div_ceil(100);
    times.get(rank.saturating_sub(1)).copied()
}

/// Every check of `scenario`, in file order: the call completes, then each turn's, then the
/// call's.
pub(crate) fn checks(scenario: &Scenario) -> Vec<Check> {
    let mut checks = vec![Check::new(Scope::Call, Kind::Completes)];
    let mut judges = 0;
    for (index, turn) in scenario.turns.iter().enumerate() {
        if turn.barge_in.is_some() {
            checks.push(Check::new(Scope::Turn(index), Kind::BargeInReached));
        }
        expect_checks(Scope::Turn(index), &turn.expect, &mut checks, &mut judges);
    }
    expect_checks(Scope::Call, &scenario.expect, &mut checks, &mut judges);
    checks.extend(goal_check(scenario, judges));
    checks
}

fn expect_checks(scope: Scope, expect: &Expect, checks: &mut Vec<Check>, judges: &mut usize) {
    let mut add = |kind| checks.push(Check::new(scope, kind));
    for tool in &expect.tools {
        add(Kind::Tool(tool.clone()));
    }
    for log in &expect.logs {
        add(Kind::Log(log.as_tool()));
    }
    if !expect.tool_order.is_empty() {
        add(Kind::ToolOrder(expect.tool_order.clone()));
    }
    let ReplyExpect {
        contains,
        not_contains,
        regex,
        max_sentences,
        language,
    } = &expect.reply;
    contains.iter().for_each(|s| add(Kind::Contains(s.clone())));
    not_contains
        .iter()
        .for_each(|s| add(Kind::NotContains(s.clone())));
    regex.iter().for_each(|s| add(Kind::Regex(s.clone())));
    if let Some(n) = max_sentences {
        add(Kind::MaxSentences(*n));
    }
    if let Some(name) = language {
        add(Kind::Language(name.clone()));
    }
    let Budget {
        first_chunk_ms,
        turn_ms,
        p95_first_chunk_ms,
        p95_turn_ms,
        chunks_after_barge_in,
    } = &expect.budget;
    let budgets = [
        first_chunk_ms.map(Kind::FirstChunk),
        turn_ms.map(Kind::TurnTime),
        p95_first_chunk_ms.map(Kind::P95FirstChunk),
        p95_turn_ms.map(Kind::P95TurnTime),
        chunks_after_barge_in.map(Kind::ChunksAfterBargeIn),
    ];
    budgets.into_iter().flatten().for_each(&mut add);
    if let Some(yes) = expect.end_call {
        add(Kind::EndCall(yes));
    }
    if let Some(yes) = expect.transfer {
        add(Kind::Transfer(yes));
    }
    if let Some(number) = &expect.transfer_to {
        add(Kind::TransferTo(number.clone()));
    }
    if let Some(yes) = expect.handoff {
        add(Kind::Handoff(yes));
    }
    if let Some(yes) = expect.agent_error {
        add(Kind::AgentError(yes));
    }
    if let Some(yes) = expect.silent {
        add(Kind::Silent(yes));
    }
    for judge in &expect.judge {
        add(Kind::Judge {
            id: *judges,
            rubric: judge.rubric.clone(),
            min_score: judge.min_score,
            below: false,
        });
        *judges += 1;
    }
}

/// The judge check of a simulated caller's goal, when the scenario asks for one.
fn goal_check(scenario: &Scenario, judges: usize) -> Option<Check> {
    let (caller, met) = (scenario.caller.as_ref()?, scenario.expect.goal_met?);
    Some(Check::new(
        Scope::Call,
        Kind::Judge {
            id: judges,
            rubric: format!(
                "The caller's goal was reached in this call: {} (score 1: fully reached; 0: \
                 not at all)",
                caller.goal.trim()
            ),
            min_score: caller.goal_min_score,
            below: !met,
        },
    ))
}

/// The expectation in words.
fn describe(kind: &Kind) -> String {
    match kind {
        Kind::Completes => "the call runs every turn".to_owned(),
        Kind::BargeInReached => "the barge-in point is reached".to_owned(),
        Kind::Tool(tool) => format!("{} {}", tool.describe_call(), describe_count(tool)),
        Kind::ToolOrder(order) => format!("tools in order {}", order.join(" → ")),
        Kind::Log(log) => format!(
            "agent.log {} {}",
            log.describe_call(),
            describe_count(log).replace("called", "logged")
        ),
        Kind::Contains(text) => format!("reply contains {text:?}"),
        Kind::NotContains(text) => format!("reply does not contain {text:?}"),
        Kind::Regex(pattern) => format!("reply matches /{pattern}/"),
        Kind::MaxSentences(n) => format!("reply has at most {n} sentences"),
        Kind::Language(name) => format!("reply is in {name}"),
        Kind::FirstChunk(ms) => format!("first chunk within {ms} ms"),
        Kind::TurnTime(ms) => format!("turn ends within {ms} ms"),
        Kind::P95FirstChunk(ms) => format!("p95 first chunk within {ms} ms"),
        Kind::P95TurnTime(ms) => format!("p95 turn time within {ms} ms"),
        Kind::ChunksAfterBargeIn(n) => format!("at most {n} chunks after the barge-in"),
        Kind::EndCall(true) => "the crew ends the call".to_owned(),
        Kind::EndCall(false) => "the crew does not end the call".to_owned(),
        Kind::Transfer(true) => "the crew transfers the call once".to_owned(),
        Kind::Transfer(false) => "the crew does not transfer the call".to_owned(),
        Kind::TransferTo(number) => format!("the crew transfers the call once to {number}"),
        Kind::Handoff(true) => "the crew hands the call off".to_owned(),
        Kind::Handoff(false) => "the call stays with the crew".to_owned(),
        Kind::AgentError(true) => "the crew reports an error (agent.error)".to_owned(),
        Kind::AgentError(false) => "the crew reports no error".to_owned(),
        Kind::Silent(true) => "the crew says nothing".to_owned(),
        Kind::Silent(false) => "the crew says something".to_owned(),
        Kind::Judge {
            rubric,
            min_score,
            below: true,
            ..
        } => format!("judge scores below {min_score}: {}", short(rubric)),
        Kind::Judge {
            rubric, min_score, ..
        } => format!("judge scores at least {min_score}: {}", short(rubric)),
    }
}

/// A rubric cut for a check's name.
fn short(rubric: &str) -> String {
    let mut short: String = rubric.chars().take(80).collect();
    if short.len() < rubric.len() {
        short.push('…');
    }
    short
}

fn describe_count(tool: &ToolExpect) -> String {
    match (tool.count, tool.once, tool.never) {
        (_, _, true) => "never called".to_owned(),
        (_, true, _) | (Some(1), _, _) => "called once".to_owned(),
        (Some(n), _, _) => format!("called {n} times"),
        _ => "called".to_owned(),
    }
}

impl Kind {
    /// Whether the check is judged on each turn's own record (reply, budgets), rather than
    /// on the calls of all turns in scope together (tools, hand-offs).
    fn per_turn(&self) -> bool {
        matches!(
            self,
            Self::BargeInReached
                | Self::Contains(_)
                | Self::NotContains(_)
                | Self::Regex(_)
                | Self::MaxSentences(_)
                | Self::Language(_)
                | Self::FirstChunk(_)
                | Self::TurnTime(_)
                | Self::ChunksAfterBargeIn(_)
                | Self::Silent(_)
        )
    }

    /// Whether the check is about a reply the turn must have (skipped on a silence, over
    /// the call), rather than about what must not be said.
    fn needs_a_reply(&self, turn: &TurnRecord) -> bool {
        match self {
            Self::NotContains(_) | Self::MaxSentences(_) | Self::Silent(_) => false,
            Self::Language(_) => turn.text.trim().is_empty(),
            _ => true,
        }
    }

    fn judge_turn(&self, turn: &TurnRecord) -> Result<(), String> {
        let lower = turn.text.to_lowercase();
        // An empty or odd reply is often explained by the crew's own error report.
        let came = || match turn.errors.as_slice() {
            [] => format!("came: {}", quote(&turn.text)),
            errors => format!(
                "came: {} (the crew sent agent.error: {})",
                quote(&turn.text),
                errors.join("; ")
            ),
        };
        match self {
            Self::BargeInReached => match turn.barge_in {
                Some(barge_in) if !barge_in.reached => Err(format!(
                    "expected to barge in during the reply; it ended first, after {} chunks",
                    barge_in.chunks_before
                )),
                _ => Ok(()),
            },
            Self::Contains(text) if !lower.contains(&text.to_lowercase()) => Err(format!(
                "expected the reply to contain {text:?}; {}",
                came()
            )),
            Self::NotContains(text) if lower.contains(&text.to_lowercase()) => Err(format!(
                "expected the reply not to contain {text:?}; {}",
                came()
            )),
            Self::Regex(pattern) => match matcher::compile(pattern) {
                Ok(regex) if regex.is_match(&turn.text) => Ok(()),
                Ok(_) => Err(format!(
                    "expected the reply to match /{pattern}/; {}",
                    came()
                )),
                Err(error) => Err(error),
            },
            Self::MaxSentences(max) => {
                let count = sentences(&turn.text);
                if count > *max as usize {
                    Err(format!(
                        "expected at most {max} sentences; came {count}: {}",
                        quote(&turn.text)
                    ))
                } else {
                    Ok(())
                }
            }
            Self::Silent(true) if !turn.text.trim().is_empty() => {
                Err(format!("expected the crew to say nothing; {}", came()))
            }
            Self::Silent(false) if turn.text.trim().is_empty() => {
                Err(format!("expected the crew to say something; {}", came()))
            }
            Self::Language(name) => judge_language(name, &turn.text)
                .map_err(|why| format!("expected a reply in {name}; {why}: {}", quote(&turn.text))),
            Self::FirstChunk(budget) => within("the first chunk", *budget, turn.first_chunk),
            Self::TurnTime(budget) => within("the turn's end", *budget, turn.turn_time),
            Self::ChunksAfterBargeIn(max) => match turn.barge_in {
                Some(barge_in) if barge_in.chunks_after > *max as usize => Err(format!(
                    "expected at most {max} chunks after the barge-in; came {}",
                    barge_in.chunks_after
                )),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn judge_calls<'a>(&self, turns: impl Iterator<Item = &'a TurnRecord>) -> Result<(), String> {
        let turns: Vec<&TurnRecord> = turns.collect();
        let tools: Vec<&ToolCallRecord> = turns.iter().flat_map(|t| &t.tools).collect();
        let logs: Vec<&ToolCallRecord> = turns.iter().flat_map(|t| &t.logs).collect();
        let end_calls: usize = turns.iter().map(|t| t.end_calls).sum();
        let transfers: Vec<&String> = turns.iter().flat_map(|t| &t.transfers).collect();
        let errors: Vec<&String> = turns.iter().flat_map(|t| &t.errors).collect();
        match self {
            Self::Tool(expect) => judge_tool(expect, &tools),
            Self::ToolOrder(order) => judge_order(order, &tools),
            Self::Log(expect) => judge_log(expect, &logs),
            Self::EndCall(yes) if *yes != (end_calls > 0) => Err(format!(
                "expected {}agent.end_call; came {end_calls}",
                if *yes { "" } else { "no " }
            )),
            Self::Transfer(true) if transfers.len() != 1 => Err(format!(
                "expected exactly one agent.transfer_call; came {}{}",
                transfers.len(),
                numbers(&transfers)
            )),
            Self::Transfer(false) if !transfers.is_empty() => Err(format!(
                "expected no agent.transfer_call; came {}{}",
                transfers.len(),
                numbers(&transfers)
            )),
            Self::TransferTo(number) if transfers.as_slice() != [number] => Err(format!(
                "expected one agent.transfer_call to {number}; came {}{}",
                transfers.len(),
                numbers(&transfers)
            )),
            Self::Handoff(yes) if *yes != (end_calls + transfers.len() > 0) => Err(format!(
                "expected {}; came {end_calls} agent.end_call and {} agent.transfer_call",
                if *yes { "a hand-off" } else { "no hand-off" },
                transfers.len()
            )),
            Self::AgentError(true) if errors.is_empty() => {
                let said: Vec<&str> = turns.iter().map(|t| t.text.as_str()).collect();
                Err(format!(
                    "expected an agent.error; none came (the crew said: {})",
                    quote(&said.join(" "))
                ))
            }
            Self::AgentError(false) if !errors.is_empty() => {
                let errors: Vec<String> = errors
                    .iter()
                    .map(|e| e.chars().take(QUOTED_ERROR_CHARS).collect())
                    .collect();
                Err(format!(
                    "expected no agent.error; came {}: {}",
                    errors.len(),
                    errors.join("; ")
                ))
            }
            _ => Ok(()),
        }
    }
}

fn judge_tool(expect: &ToolExpect, tools: &[&ToolCallRecord]) -> Result<(), String> {
    let matching = tools
        .iter()
        .filter(|call| expect.matches_call(call))
        .count();
    let (holds, wanted) = match (expect.count, expect.once, expect.never) {
        (_, _, true) => (matching == 0, "no call".to_owned()),
        (_, true, _) => (matching == 1, "exactly one call".to_owned()),
        (Some(n), _, _) => (matching == n as usize, format!("exactly {n} calls")),
        _ => (matching > 0, "a call".to_owned()),
    };
    if holds {
        return Ok(());
    }
    Err(format!(
        "expected {wanted} of {}; {matching} matched, came: {}",
        expect.describe_call(),
        list_calls(tools)
    ))
}

fn judge_log(expect: &ToolExpect, logs: &[&ToolCallRecord]) -> Result<(), String> {
    let matching = logs.iter().filter(|log| expect.matches_call(log)).count();
    let (holds, wanted) = match (expect.count, expect.once, expect.never) {
        (_, _, true) => (matching == 0, "no agent.log".to_owned()),
        (_, true, _) => (matching == 1, "exactly one agent.log".to_owned()),
        (Some(n), _, _) => (matching == n as usize, format!("exactly {n} agent.logs")),
        _ => (matching > 0, "an agent.log".to_owned()),
    };
    if holds {
        return Ok(());
    }
    let came = if logs.is_empty() {
        "no agent.log".to_owned()
    } else {
        logs.iter()
            .map(|log| format!("{} {}", log.name, matcher::arguments_value(&log.arguments)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(format!(
        "expected {wanted} {}; {matching} matched, came: {came}",
        expect.describe_call()
    ))
}

fn judge_order(order: &[String], tools: &[&ToolCallRecord]) -> Result<(), String> {
    let firsts: Vec<Option<usize>> = order
        .iter()
        .map(|name| tools.iter().position(|call| &call.name == name))
        .collect();
    let in_order = firsts.iter().all(Option::is_some) && firsts.windows(2).all(|w| w[0] < w[1]);
    if in_order {
        return Ok(());
    }
    let came: Vec<&str> = tools.iter().map(|call| call.name.as_str()).collect();
    Err(format!(
        "expected {}; came: {}",
        order.join(" → "),
        if came.is_empty() {
            "no tool calls".to_owned()
        } else {
            came.join(" → ")
        }
    ))
}

fn within(what: &str, budget: u64, took: Option<Duration>) -> Result<(), String> {
    match took {
        Some(took) if took <= Duration::from_millis(budget) => Ok(()),
        Some(took) => Err(format!(
            "expected {what} within {budget} ms; came after {} ms",
            took.as_millis()
        )),
        None => Err(format!("expected {what} within {budget} ms; none came")),
    }
}

fn list_calls(tools: &[&ToolCallRecord]) -> String {
    if tools.is_empty() {
        return "no tool calls".to_owned();
    }
    let call = |call: &ToolCallRecord| {
        let arguments = matcher::arguments_value(&call.arguments);
        match &call.outcome {
            Some(Ok(())) | None => format!("{} {arguments}", call.name),
            Some(Err(error)) => {
                let error: String = error.chars().take(QUOTED_ERROR_CHARS).collect();
                format!("{} {arguments} (failed: {error})", call.name)
            }
        }
    };
    tools.iter().map(|c| call(c)).collect::<Vec<_>>().join(", ")
}

fn numbers(transfers: &[&String]) -> String {
    if transfers.is_empty() {
        return String::new();
    }
    let numbers: Vec<&str> = transfers.iter().map(|n| n.as_str()).collect();
    format!(" (to {})", numbers.join(", "))
}

/// The reply quoted, cut to [`QUOTED_REPLY_CHARS`].
fn quote(text: &str) -> String {
    if text.is_empty() {
        return "an empty reply".to_owned();
    }
    let mut quoted: String = text.chars().take(QUOTED_REPLY_CHARS).collect();
    if quoted.len() < text.len() {
        quoted.push('…');
    }
    format!("{quoted:?}")
}

/// Whether `text` reads as the language `name` names; `Err` says what it reads as.
fn judge_language(name: &str, text: &str) -> Result<(), String> {
    let expected = crate::scenario::language(name)?;
    if text.trim().is_empty() {
        return Err("there are no words to tell".to_owned());
    }
    match whatlang::detect(text) {
        Some(info) if info.lang() == expected => Ok(()),
        Some(info) => Err(format!(
            "it reads as {} (confidence {:.2})",
            info.lang().eng_name(),
            info.confidence()
        )),
        None => Err("its language could not be told".to_owned()),
    }
}

/// How many sentences a text-to-speech front-end would make of `text`.
fn sentences(text: &str) -> usize {
    let mut aggregator = SentenceAggregator::with_min_chars(1);
    aggregator.push(text).len() + usize::from(aggregator.flush().is_some())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn p95_is_the_nearest_rank() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        assert_eq!(p95(ms(&[10])), Some(Duration::from_millis(10)));
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(p95(ms(&hundred)), Some(Duration::from_millis(95)));
        assert_eq!(p95(ms(&[5, 1, 9])), Some(Duration::from_millis(9)));
        assert_eq!(p95(Vec::new()), None);
    }

    fn calls(named: &[(&str, Value)]) -> Vec<ToolCallRecord> {
        named
            .iter()
            .map(|(name, arguments)| ToolCallRecord {
                name: (*name).to_owned(),
                arguments: arguments.clone(),
                outcome: Some(Ok(())),
            })
            .collect()
    }

    fn tool(expect: Value) -> ToolExpect {
        serde_json::from_value(expect).expect("a valid expectation")
    }

    #[test]
    fn a_tool_count_failure_says_how_many_matched_and_lists_what_came() {
        let came = calls(&[
            ("transfer_money", serde_json::json!({"amount": 50})),
            ("transfer_money", serde_json::json!({"amount": 50})),
        ]);
        let came: Vec<&ToolCallRecord> = came.iter().collect();
        let once = tool(serde_json::json!({"name": "transfer_money", "once": true}));
        assert_eq!(
            judge_tool(&once, &came).unwrap_err(),
            r#"expected exactly one call of transfer_money(); 2 matched, came: transfer_money {"amount":50}, transfer_money {"amount":50}"#
        );
        let never = tool(
            serde_json::json!({"name": "transfer_money", "never": true, "args": {"amount": {"min": 1000}}}),
        );
        assert!(judge_tool(&never, &came).is_ok(), "no call of 1000 or more");
        let none = tool(serde_json::json!({"name": "lookup"}));
        assert_eq!(
            judge_tool(&none, &[]).unwrap_err(),
            "expected a call of lookup(); 0 matched, came: no tool calls"
        );
    }

    #[test]
    fn tool_order_counts_each_name_s_first_call() {
        let came = calls(&[
            ("lookup", Value::Null),
            ("confirm", Value::Null),
            ("lookup", Value::Null),
            ("transfer", Value::Null),
        ]);
        let came: Vec<&ToolCallRecord> = came.iter().collect();
        let order = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert!(judge_order(&order(&["lookup", "confirm", "transfer"]), &came).is_ok());
        assert_eq!(
            judge_order(&order(&["confirm", "lookup"]), &came).unwrap_err(),
            "expected confirm → lookup; came: lookup → confirm → lookup → transfer"
        );
        assert!(judge_order(&order(&["refund"]), &came).is_err());
    }

    /// A call whose one turn took `first` ms to its first chunk and `end` ms to its end.
    fn timed_call(first: u64, end: u64) -> CallRecord {
        CallRecord {
            turns: vec![TurnRecord {
                first_chunk: Some(Duration::from_millis(first)),
                turn_time: Some(Duration::from_millis(end)),
                ..TurnRecord::default()
            }],
            ..CallRecord::default()
        }
    }

    #[test]
    fn budgets_hold_per_run_and_p95_over_runs() {
        let first_chunk = Check::new(Scope::Turn(0), Kind::FirstChunk(500));
        assert!(
            first_chunk.judge(&timed_call(500, 900)).is_ok(),
            "the budget itself is within"
        );
        assert_eq!(
            first_chunk.judge(&timed_call(501, 900)).unwrap_err(),
            "expected the first chunk within 500 ms; came after 501 ms"
        );
        let every_turn = Check::new(Scope::Call, Kind::TurnTime(800));
        assert_eq!(every_turn.name, "every turn: turn ends within 800 ms");
        assert_eq!(
            every_turn.judge(&timed_call(10, 900)).unwrap_err(),
            "turn 1: expected the turn's end within 800 ms; came after 900 ms"
        );
        // Twenty runs, one slow: the nearest-rank p95 is the 19th fastest.
        let mut calls: Vec<CallRecord> = (1..=19).map(|ms| timed_call(ms, 100 + ms)).collect();
        calls.push(timed_call(5_000, 9_000));
        let p95 = Check::new(Scope::Turn(0), Kind::P95TurnTime(119));
        assert!(p95.over_runs());
        assert!(p95.judge_over(&calls).is_ok());
        let tight = Check::new(Scope::Turn(0), Kind::P95TurnTime(118));
        assert_eq!(
            tight.judge_over(&calls).unwrap_err(),
            "turn 1: expected a p95 turn time within 118 ms; came 119 ms over 20 runs"
        );
    }

    #[test]
    fn a_reply_s_language_is_told_from_its_words() {
        let french = "Il fait dix-huit degrés à Paris aujourd'hui, avec un grand soleil.";
        assert!(judge_language("fra", french).is_ok());
        assert!(judge_language("French", french).is_ok());
        let error = judge_language("deu", french).unwrap_err();
        assert!(
            error.starts_with("it reads as French (confidence "),
            "{error}"
        );
        assert_eq!(
            judge_language("eng", " ").unwrap_err(),
            "there are no words to tell"
        );
        let check = Check::new(Scope::Turn(0), Kind::Language("eng".to_owned()));
        let call = CallRecord {
            turns: vec![TurnRecord {
                text: french.to_owned(),
                ..TurnRecord::default()
            }],
            ..CallRecord::default()
        };
        let message = check.judge(&call).unwrap_err();
        assert!(
            message.starts_with("expected a reply in eng; it reads as French"),
            "{message}"
        );
        assert!(message.ends_with("avec un grand soleil.\""), "{message}");
    }

    #[test]
    fn sentences_are_counted_as_speech_would_cut_them() {
        assert_eq!(sentences("Hi! How are you? I'm fine."), 3);
        assert_eq!(sentences("It costs $1,200.50 in the U.S. today"), 1);
        assert_eq!(sentences(""), 0);
    }
}

/// What an expectation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckCategory {
    /// The call ran every turn.
    Call,
    /// A barge-in: placed where the turn says, and the crew silent after it.
    BargeIn,
    /// Tool calls, their arguments, counts and order.
    Tool,
    /// The crew's own `agent.log` events.
    Log,
    /// What the replies say.
    Reply,
    /// Latency budgets: measured times, which vary with the machine.
    Latency,
    /// `end_call`, transfers, hand-offs.
    Handoff,
    /// Errors the crew reported (`agent.error`).
    Error,
    /// An LLM judge's score against a rubric.
    Judge,
}

//! One turn's record and the assertions on it, with failure messages that show the turn.

use std::fmt;

use crewline::protocol::AgentError;
use serde_json::{Map, Value};

use crate::platform::{CrewFrame, Handoff, ToolActivity, ToolOutcome, TurnFrame, TurnSummary};

/// What came out of one turn of a [`TestCall`](super::TestCall): the spoken text, the tool
/// calls, the hand-off and the frames, with assertions.
///
/// Every `assert_*` method panics (failing the test) with a message that shows what was
/// expected and the whole actual turn, and returns the record so assertions chain.
/// `{record}` (its `Display`) is that readable form of the turn.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
///
/// use crewline::{agent::LoopAgent, ToolLoop, prelude::*, tool::ToolRegistry};
/// use crewline_testkit::{ScriptedLlm, ScriptedReply as Reply};
/// use crewline_testkit::TestCrew;
/// use serde_json::json;
///
/// struct Weather;
///
/// #[tools]
/// impl Weather {
///     /// The weather in a city.
///     ///
///     /// # Arguments
///     /// * `city` - The city
///     #[function_tool]
///     async fn get_weather(&self, city: String) -> Result<serde_json::Value, ToolError> {
///         Ok(json!({"city": city, "sky": "sunny"}))
///     }
/// }
///
/// fn weather_crew(_setup: &SessionSetup) -> Result<Crew, crewline::tool::RegistryError> {
///     let llm = ScriptedLlm::new([
///         Reply::tool_call("get_weather", json!({"city": "Paris"})),
///         Reply::text("It is sunny in Paris."),
///     ]);
///     let mut tools = ToolRegistry::new();
///     tools.discover(&Arc::new(Weather))?;
///     let mut crew = Crew::new();
///     crew.add_node(OutputNode::new(
///         "weather",
///         LoopAgent::new("Tell the weather.", ToolLoop::new(Arc::new(llm), Arc::new(tools))),
///     ));
///     Ok(crew)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), crewline_testkit::TestkitError> {
/// let crew = TestCrew::serve(weather_crew).await?;
/// let mut call = crew.call().await?;
/// let turn = call.say("Weather in Paris?").await?;
/// turn.assert_tool_call("get_weather", json!({"city": "Paris"}))
///     .returned(json!({"city": "Paris", "sky": "sunny"}));
/// turn.assert_text("It is sunny in Paris.").assert_no_handoff();
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    summary: TurnSummary,
}

/// Panics with `expected` and the actual turn.
#[track_caller]
fn fail(expected: fmt::Arguments<'_>, turn: &TurnRecord) -> ! {
    panic!("expected {expected}\nbut the turn was:\n{turn}")
}

impl TurnRecord {
    /// The record of a finished turn.
    pub fn new(summary: TurnSummary) -> Self {
        Self { summary }
    }

    /// What the user said.
    pub fn user_text(&self) -> &str {
        &self.summary.user_text
    }

    /// The spoken answer: the turn's chunks, joined.
    pub fn text(&self) -> &str {
        &self.summary.text
    }

    /// The turn's tool calls, in the order the crew logged them.
    pub fn tool_calls(&self) -> &[ToolActivity] {
        &self.summary.tools
    }

    /// The crew's hand-off during the turn (`end_call` or `transfer_call`), if any.
    pub fn handoff(&self) -> Option<&Handoff> {
        self.summary.handoff.as_ref()
    }

    /// The `agent.error`s of the turn.
    pub fn errors(&self) -> &[AgentError] {
        &self.summary.errors
    }

    /// The turn's other `agent.log` entries (not the tool logs), in order: what background
    /// nodes put on the call's timeline, as `(name, payload)`.
    pub fn logs(&self) -> &[(String, Map<String, Value>)] {
        &self.summary.logs
    }

    /// Every crew frame of the turn, in order, with its time since the request.
    pub fn frames(&self) -> &[TurnFrame] {
        &self.summary.frames
    }

    /// The wire types of the turn's frames, in order (`agent.llm.response.start`, ...).
    pub fn wire_types(&self) -> Vec<&'static str> {
        self.summary.wire_types()
    }

    /// Everything the platform client measured of the turn (latencies, the interrupt
    /// report, the stray chunks).
    pub fn summary(&self) -> &TurnSummary {
        &self.summary
    }

    /// The summary, by value.
    pub fn into_summary(self) -> TurnSummary {
        self.summary
    }

    /// Asserts that the spoken answer is exactly `expected`.
    #[track_caller]
    pub fn assert_text(&self, expected: &str) -> &Self {
        if self.text() != expected {
            fail(format_args!("the crew to say {expected:?}"), self);
        }
        self
    }

    /// Asserts that the spoken answer contains `fragment`.
    #[track_caller]
    pub fn assert_text_contains(&self, fragment: &str) -> &Self {
        if !self.text().contains(fragment) {
            fail(
                format_args!("the crew to say something with {fragment:?}"),
                self,
            );
        }
        self
    }

    /// Asserts that the crew called no tool.
    #[track_caller]
    pub fn assert_no_tool_calls(&self) -> &Self {
        if !self.tool_calls().is_empty() {
            fail(format_args!("no tool call"), self);
        }
        self
    }

    /// Asserts that the crew called `name` with exactly these `arguments`; the returned
    /// check asserts on how the call ended. With several such calls, the first one.
    #[track_caller]
    pub fn assert_tool_call(&self, name: &str, arguments: Value) -> ToolCallCheck<'_> {
        let found = self
            .tool_calls()
            .iter()
            .find(|call| call.name == name && call.arguments == arguments);
        match found {
            Some(call) => ToolCallCheck { record: self, call },
            None => fail(format_args!("a call of `{name}` with {arguments}"), self),
        }
    }

    /// Asserts that the crew called these tools, in this order, and no others.
    #[track_caller]
    pub fn assert_tools_called(&self, names: &[&str]) -> &Self {
        let called: Vec<&str> = self.tool_calls().iter().map(|c| c.name.as_str()).collect();
        if called != names {
            fail(format_args!("the tool calls {names:?}"), self);
        }
        self
    }

    /// Asserts that the crew logged an `agent.log` entry named `name` whose payload holds
    /// every field of `fields` (a JSON object) with that value; other fields may be there
    /// too.
    #[track_caller]
    pub fn assert_logged(&self, name: &str, fields: Value) -> &Self {
        let wanted = fields.as_object();
        let found = self.logs().iter().find(|(logged, payload)| {
            logged == name
                && wanted.is_some_and(|wanted| {
                    wanted
                        .iter()
                        .all(|(key, value)| payload.get(key) == Some(value))
                })
        });
        if found.is_none() {
            fail(format_args!("an `agent.log` `{name}` with {fields}"), self);
        }
        self
    }

    /// Asserts that the crew ended the call (`agent.end_call`) during the turn.
    #[track_caller]
    pub fn assert_ended_call(&self) -> &Self {
        if self.handoff() != Some(&Handoff::EndCall) {
            fail(format_args!("the crew to end the call"), self);
        }
        self
    }

    /// Asserts that the crew transferred the call to `number` during the turn.
    #[track_caller]
    pub fn assert_transferred_to(&self, number: &str) -> &Self {
        match self.handoff() {
            Some(Handoff::Transfer(to)) if to == number => self,
            _ => fail(format_args!("a transfer of the call to {number}"), self),
        }
    }

    /// Asserts that the crew neither ended nor transferred the call.
    #[track_caller]
    pub fn assert_no_handoff(&self) -> &Self {
        if self.handoff().is_some() {
            fail(format_args!("no hand-off"), self);
        }
        self
    }

    /// Asserts that the turn had no `agent.error`.
    #[track_caller]
    pub fn assert_no_errors(&self) -> &Self {
        if !self.errors().is_empty() {
            fail(format_args!("no agent.error"), self);
        }
        self
    }

    /// Asserts that the turn was interrupted and that the crew fell silent: the turn ended
    /// and no chunk came after its end.
    #[track_caller]
    pub fn assert_interrupted(&self) -> &Self {
        match &self.summary.interrupt {
            Some(report) if self.summary.ended && report.leaked_chunks.is_empty() => self,
            Some(_) => fail(
                format_args!("the crew to fall silent after the interrupt"),
                self,
            ),
            None => fail(format_args!("an interrupted turn"), self),
        }
    }

    /// Asserts that the turn's frames have exactly these wire types, in order.
    #[track_caller]
    pub fn assert_frames(&self, wire_types: &[&str]) -> &Self {
        if self.wire_types() != wire_types {
            fail(format_args!("the frames {wire_types:?}"), self);
        }
        self
    }
}

/// The check of one tool call, from [`TurnRecord::assert_tool_call`].
#[derive(Debug, Clone, Copy)]
pub struct ToolCallCheck<'r> {
    record: &'r TurnRecord,
    call: &'r ToolActivity,
}

impl<'r> ToolCallCheck<'r> {
    /// The call, as the crew logged it.
    pub fn call(&self) -> &'r ToolActivity {
        self.call
    }

    /// Asserts that the call succeeded; returns its result.
    #[track_caller]
    pub fn succeeded(self) -> &'r Value {
        match &self.call.outcome {
            ToolOutcome::Ok(result) => result,
            _ => fail(format_args!("`{}` to succeed", self.call.name), self.record),
        }
    }

    /// Asserts that the call succeeded with exactly `expected`.
    #[track_caller]
    pub fn returned(self, expected: Value) -> &'r TurnRecord {
        if self.succeeded() != &expected {
            fail(
                format_args!("`{}` to return {expected}", self.call.name),
                self.record,
            );
        }
        self.record
    }

    /// Asserts that the call failed with an error containing `fragment`; returns the error.
    #[track_caller]
    pub fn failed_with(self, fragment: &str) -> &'r str {
        match &self.call.outcome {
            ToolOutcome::Failed(error) if error.contains(fragment) => error,
            _ => fail(
                format_args!("`{}` to fail with {fragment:?}", self.call.name),
                self.record,
            ),
        }
    }
}

impl fmt::Display for TurnRecord {
    /// The turn as a short transcript: the words on each side, the tool calls with their
    /// outcomes, the hand-off, the errors, and the frames (runs of chunks counted).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let summary = &self.summary;
        writeln!(f, "  user:  {:?}", summary.user_text)?;
        writeln!(f, "  crew:  {:?}", summary.text)?;
        if summary.tools.is_empty() {
            writeln!(f, "  tools: none")?;
        }
        for call in &summary.tools {
            let outcome = match &call.outcome {
                ToolOutcome::Ok(result) => format!("-> {result}"),
                ToolOutcome::Failed(error) => format!("-> error: {error}"),
                ToolOutcome::Running => "-> (no end logged)".to_owned(),
            };
            writeln!(f, "  tool:  {}({}) {outcome}", call.name, call.arguments)?;
        }
        match &summary.handoff {
            None => writeln!(f, "  handoff: none")?,
            Some(Handoff::EndCall) => writeln!(f, "  handoff: end_call")?,
            Some(Handoff::Transfer(to)) => writeln!(f, "  handoff: transfer_call to {to}")?,
        }
        for (name, payload) in &summary.logs {
            let payload = serde_json::to_string(payload).unwrap_or_default();
            writeln!(f, "  log:   {name} {payload}")?;
        }
        for error in &summary.errors {
            writeln!(f, "  agent.error: {error:?}")?;
        }
        if let Some(report) = &summary.interrupt {
            writeln!(
                f,
                "  interrupted after {} ms; {} chunk(s) after it, {} after the end",
                report.sent_after.as_millis(),
                report.chunks_after_interrupt,
                report.leaked_chunks.len()
            )?;
        }
        write!(f, "  frames: {}", FrameRuns(&summary.frames))
    }
}

/// The frames' wire types, with runs of chunks counted (`agent.llm.response.chunk x5`).
struct FrameRuns<'a>(&'a [TurnFrame]);

impl fmt::Display for FrameRuns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "none (the turn never started)");
        }
        let mut index = 0;
        let mut first = true;
        while let Some(frame) = self.0.get(index) {
            let run = self.0[index..]
                .iter()
                .take_while(|next| matches!(next.frame, CrewFrame::Chunk { .. }))
                .count()
                .max(1);
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "{}", frame.frame.wire_type())?;
            if run > 1 {
                write!(f, " x{run}")?;
            }
            index += run;
        }
        Ok(())
    }
}

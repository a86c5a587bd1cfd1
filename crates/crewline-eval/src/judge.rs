//! The LLM judge: a model of any OpenAI-compatible provider reads a run's conversation and
//! scores it against a rubric; its score and reason are kept in the report.

use std::{sync::Arc, time::Duration};

use crewline::{
    llm::{AnswerLimits, ChatRequest, LlmClient, OpenAiClient, RequestOptions},
    types::Message,
};
use serde::Serialize;
use serde_json::Value;

use crate::{matcher, record::CallRecord, scenario::ProviderSpec};

/// The most bytes of a judge's answer read: a verdict is a score and a sentence or two.
pub const MAX_JUDGE_ANSWER_BYTES: usize = 16 * 1024;
/// The most tokens a judge is asked to answer in.
const MAX_JUDGE_TOKENS: u32 = 400;
/// The most characters of a reply put in front of the judge (a spoken reply is far shorter).
const MAX_REPLY_CHARS: usize = 4000;
/// The most characters of a judge's reason kept in the report.
pub const MAX_REASON_CHARS: usize = 600;
/// The most characters of a bad answer quoted when it is not a verdict.
const QUOTED_ANSWER_CHARS: usize = 200;

/// What the judge is told to do; the rubric and the conversation follow in the user message.
const INSTRUCTIONS: &str = "You grade a phone call between a caller and a voice agent against \
a rubric. Read the conversation and decide how well the part to grade meets the rubric. \
Answer with only a JSON object, no other text: {\"score\": a number from 0 (does not meet the \
rubric at all) to 1 (fully meets it), \"reason\": \"one or two sentences saying why\"}.";

pub use crate::record::Verdict;

/// A judge's verdict on one run of a check, as the report keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeVerdict {
    /// The run, counted from 1.
    pub run: u32,
    /// The score, 0 to 1 (absent when the judge gave no verdict).
    pub score: Option<f64>,
    /// The judge's reason, or why there is no verdict.
    pub reason: String,
}

/// A judging model, ready to be asked.
#[derive(Clone)]
pub(crate) struct Judge {
    client: Arc<dyn LlmClient>,
}

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judge").finish_non_exhaustive()
    }
}

impl Judge {
    /// The judge `spec` names; its key is read from the variable `api_key_env` names.
    pub(crate) fn new(spec: &ProviderSpec) -> Result<Self, String> {
        Ok(Self {
            client: client(spec, "judge")?,
        })
    }

    /// Asks the judge to grade `part` of `conversation` against `rubric`.
    pub(crate) async fn ask(
        &self,
        rubric: &str,
        conversation: &str,
        part: &str,
    ) -> Result<Verdict, String> {
        let question = format!(
            "Rubric:\n{rubric}\n\nConversation:\n{conversation}\nThe part to grade: {part}."
        );
        let request =
            ChatRequest::new(vec![Message::system(INSTRUCTIONS), Message::user(question)])
                .with_options(RequestOptions {
                    temperature: Some(0.0),
                    max_tokens: Some(MAX_JUDGE_TOKENS),
                    ..RequestOptions::default()
                });
        let answer = self.client.chat(request).await.map_err(|error| {
            format!(
                "the judge could not be asked: {}",
                crate::error_chain(&error)
            )
        })?;
        parse_verdict(&answer.content)
    }
}

/// A client of the provider `spec` names, its answers capped at [`MAX_JUDGE_ANSWER_BYTES`];
/// `who` (`judge`, `simulated caller`) names it in errors. The key is read from the variable
/// `api_key_env` names, never from the file.
pub(crate) fn client(spec: &ProviderSpec, who: &str) -> Result<Arc<dyn LlmClient>, String> {
    let key = match &spec.api_key_env {
        Some(name) => std::env::var(name)
            .map_err(|_| format!("the {who}'s key variable {name} is not set"))?,
        // A local provider (Ollama, vLLM) takes any key.
        None => "no-key".to_owned(),
    };
    let limits = AnswerLimits {
        max_answer_bytes: MAX_JUDGE_ANSWER_BYTES,
        ..AnswerLimits::default()
    };
    let client = OpenAiClient::builder()
        .model(spec.model.clone())
        .base_url(spec.base_url.clone())
        .api_key(key)
        .read_env(false)
        .answer_limits(limits)
        .first_byte_timeout(Duration::from_millis(spec.timeout_ms))
        .build()
        .map_err(|error| format!("the {who}'s client: {}", crate::error_chain(&error)))?;
    Ok(Arc::new(client))
}

/// Reads a verdict from a judge's answer: a JSON object with a `score` from 0 to 1 and a
/// `reason`, perhaps in a code fence or after some words.
pub(crate) fn parse_verdict(answer: &str) -> Result<Verdict, String> {
    let bad = |why: &str| {
        let mut quoted: String = answer.trim().chars().take(QUOTED_ANSWER_CHARS).collect();
        if quoted.len() < answer.trim().len() {
            quoted.push('…');
        }
        format!(
            "the judge's answer is not a verdict ({why}; wanted {{\"score\": 0 to 1, \"reason\": \"...\"}}): it said {quoted:?}"
        )
    };
    let object = match (answer.find('{'), answer.rfind('}')) {
        (Some(start), Some(end)) if start < end => &answer[start..=end],
        _ => return Err(bad("no JSON object")),
    };
    let value: Value = serde_json::from_str(object).map_err(|_| bad("not JSON"))?;
    let score = match value.get("score") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(_) => return Err(bad("`score` is not a number")),
        None => return Err(bad("no `score`")),
    };
    if !(0.0..=1.0).contains(&score) {
        return Err(bad("`score` is not from 0 to 1"));
    }
    let reason = match value.get("reason") {
        Some(Value::String(reason)) => reason.trim(),
        Some(_) => return Err(bad("`reason` is not a string")),
        None => return Err(bad("no `reason`")),
    };
    let mut kept: String = reason.chars().take(MAX_REASON_CHARS).collect();
    if kept.len() < reason.len() {
        kept.push('…');
    }
    Ok(Verdict {
        score,
        reason: kept,
    })
}

/// The conversation of `call` up to turn `upto` (0-based, inclusive; `None`: all of it), as
/// the judge reads it: what the caller said, what the crew said, the tools it called.
pub(crate) fn transcript(says: &[Option<&str>], call: &CallRecord, upto: Option<usize>) -> String {
    let mut text = String::new();
    let last = upto.map_or(call.turns.len(), |turn| (turn + 1).min(call.turns.len()));
    for (index, turn) in call.turns.iter().take(last).enumerate() {
        let say = match says.get(index).copied().flatten() {
            Some(say) => say,
            None if turn.silence => "(says nothing for a while)",
            None => "",
        };
        text.push_str(&format!("Turn {}\nCaller: {say}\n", index + 1));
        for tool in &turn.tools {
            let outcome = match &tool.outcome {
                Some(Ok(())) => "done".to_owned(),
                Some(Err(error)) => format!("failed: {error}"),
                None => "still running".to_owned(),
            };
            text.push_str(&format!(
                "(the agent called the tool {} with {}: {outcome})\n",
                tool.name,
                matcher::arguments_value(&tool.arguments)
            ));
        }
        let reply: String = turn.text.chars().take(MAX_REPLY_CHARS).collect();
        text.push_str(&format!("Agent: {reply}\n"));
        if !turn.errors.is_empty() {
            text.push_str(&format!(
                "(the agent reported an error: {})\n",
                turn.errors.join("; ")
            ));
        }
        if turn.end_calls > 0 {
            text.push_str("(the agent ended the call)\n");
        }
        for number in &turn.transfers {
            text.push_str(&format!("(the agent transferred the call to {number})\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_read_from_json_in_words_or_a_fence() {
        let verdict = parse_verdict("```json\n{\"score\": 0.8, \"reason\": \"Both cities.\"}\n```")
            .expect("a verdict");
        assert_eq!(verdict.score, 0.8);
        assert_eq!(verdict.reason, "Both cities.");
        assert!(parse_verdict("Here: {\"score\": 1, \"reason\": \"ok\"}").is_ok());
    }

    #[test]
    fn bad_answers_say_what_is_wrong_and_quote_the_judge() {
        let cases = [
            ("I think it is fine.", "no JSON object"),
            ("{score: high}", "not JSON"),
            ("{\"reason\": \"fine\"}", "no `score`"),
            (
                "{\"score\": \"0.9\", \"reason\": \"fine\"}",
                "`score` is not a number",
            ),
            (
                "{\"score\": 7, \"reason\": \"fine\"}",
                "`score` is not from 0 to 1",
            ),
            ("{\"score\": 0.9}", "no `reason`"),
        ];
        for (answer, why) in cases {
            let error = parse_verdict(answer).expect_err(answer);
            assert!(error.contains(why), "{answer}: {error}");
            assert!(error.contains("it said"), "{error}");
        }
    }

    #[test]
    fn the_transcript_shows_words_tools_errors_silences_and_hand_offs() {
        use crate::record::{ToolCallRecord, TurnRecord};
        let call = CallRecord {
            turns: vec![
                TurnRecord {
                    text: "It is 18 degrees.".to_owned(),
                    tools: vec![ToolCallRecord {
                        name: "get_weather".to_owned(),
                        arguments: serde_json::json!({"location": "Paris"}),
                        outcome: Some(Ok(())),
                    }],
                    ..TurnRecord::default()
                },
                TurnRecord {
                    silence: true,
                    ..TurnRecord::default()
                },
                TurnRecord {
                    text: "Goodbye!".to_owned(),
                    errors: vec!["model down".to_owned()],
                    end_calls: 1,
                    ..TurnRecord::default()
                },
            ],
            ..CallRecord::default()
        };
        let says = [Some("Weather in Paris?"), None, Some("Bye")];
        assert_eq!(
            transcript(&says, &call, None),
            "Turn 1\nCaller: Weather in Paris?\n\
             (the agent called the tool get_weather with {\"location\":\"Paris\"}: done)\n\
             Agent: It is 18 degrees.\n\
             Turn 2\nCaller: (says nothing for a while)\nAgent: \n\
             Turn 3\nCaller: Bye\nAgent: Goodbye!\n\
             (the agent reported an error: model down)\n(the agent ended the call)\n"
        );
        assert!(transcript(&says, &call, Some(0)).ends_with("Agent: It is 18 degrees.\n"));
    }

    #[test]
    fn a_long_reason_is_cut() {
        let long = "x".repeat(MAX_REASON_CHARS * 2);
        let verdict =
            parse_verdict(&format!("{{\"score\": 0.5, \"reason\": \"{long}\"}}")).expect("ok");
        assert_eq!(verdict.reason.chars().count(), MAX_REASON_CHARS + 1);
    }
}

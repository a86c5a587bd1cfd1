//! How async-openai's errors become the same [`LlmError`] kinds the default client reports.

use std::{error::Error as StdError, time::Duration};

use ::async_openai::error::OpenAIError;
use secrecy::{ExposeSecret, SecretString};

use super::retry_after::RetryAfterAnswer;
use crate::{ErrorDetail, LlmError, openai::error_body_message};

/// The most characters of a server's error message kept: enough for any real one, never a
/// body-sized log line or `agent.error` (async-openai hands over bodies whole).
const MAX_MESSAGE_CHARS: usize = 2_000;

/// `message` cut to [`MAX_MESSAGE_CHARS`].
fn bounded(message: String) -> String {
    if message.len() <= MAX_MESSAGE_CHARS {
        return message;
    }
    crate::openai::snippet(&message, MAX_MESSAGE_CHARS)
}

/// An error from before the first byte of a streamed answer (the request, its status).
pub(super) fn before_first_byte(error: OpenAIError, timeout: Duration) -> LlmError {
    match error {
        // async-openai reads an error answer as OpenAI's `{"error": ..}` and, failing that,
        // gives its body without the status: the server's message is all that is left.
        OpenAIError::JSONDeserialize(_, body) => unread_error_answer(body),
        other => common(other, timeout),
    }
}

/// An error answer async-openai could not read as OpenAI's: the status is lost, the server's
/// message is read from `body` as the default client reads it.
fn unread_error_answer(body: String) -> LlmError {
    let message = if body.trim().is_empty() {
        // A 404 from a wrong URL often has no body at all: say at least that much.
        "the server answered an error with an empty body (async-openai does not pass on its \
         HTTP status; check the client's URL)"
            .to_owned()
    } else {
        error_body_message(body.as_bytes()).unwrap_or(body)
    };
    LlmError::Api {
        status: None,
        message: bounded(message),
        retry_after: None,
    }
}

/// An error of a whole (non-streamed) answer. The answer is read as raw JSON, so a body that
/// is JSON and still failed is an error answer async-openai could not read (as before the
/// first byte); one that is no JSON at all is unreadable.
pub(super) fn whole_answer(error: OpenAIError, timeout: Duration) -> LlmError {
    match error {
        OpenAIError::JSONDeserialize(_, body)
            if serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok() =>
        {
            unread_error_answer(body)
        }
        OpenAIError::JSONDeserialize(cause, body) => {
            let message = format!(
                "{cause}; the answer began with: {}",
                crate::openai::snippet(&body, 300)
            );
            LlmError::InvalidResponse(ErrorDetail::caused_by(message, cause))
        }
        other => common(other, timeout),
    }
}

/// An error while the stream was being read: the answer is cut, or an event was no JSON.
pub(super) fn mid_stream(error: OpenAIError) -> Option<LlmError> {
    Some(match error {
        // A `data:` line with nothing in it: skipped, as the default client skips it.
        OpenAIError::JSONDeserialize(_, data) if data.trim().is_empty() => return None,
        OpenAIError::JSONDeserialize(cause, data) => {
            LlmError::InvalidResponse(ErrorDetail::caused_by(
                format!(
                    "a stream event is not a JSON chunk ({cause}): {}",
                    crate::openai::snippet(&data, 300)
                ),
                cause,
            ))
        }
        other => {
            let message = bounded(format!("stream failed: {}", chain(&other)));
            LlmError::StreamCut(ErrorDetail::caused_by(message, other))
        }
    })
}

/// The kinds every stage shares.
fn common(error: OpenAIError, timeout: Duration) -> LlmError {
    match error {
        OpenAIError::ApiError(answer) => {
            let status = answer.status_code;
            // async-openai keeps a 5xx body as it came (it need not be JSON): read its message
            // as the default client does.
            let message = if status.is_server_error() {
                error_body_message(answer.api_error.message.as_bytes())
                    .unwrap_or(answer.api_error.message)
            } else {
                answer.api_error.message
            };
            LlmError::Api {
                status: Some(status.as_u16()),
                message: bounded(message),
                retry_after: None,
            }
        }
        OpenAIError::Reqwest(err) if err.is_timeout() && !err.is_connect() => {
            LlmError::Timeout(timeout)
        }
        OpenAIError::Reqwest(err) if err.is_body() || err.is_decode() => {
            LlmError::InvalidResponse(ErrorDetail::caused_by(bounded(chain(&err)), err))
        }
        OpenAIError::Reqwest(err) => {
            LlmError::Connect(ErrorDetail::caused_by(bounded(chain(&err)), err))
        }
        OpenAIError::StreamError(_) => {
            let message = bounded(format!("stream failed: {}", chain(&error)));
            LlmError::StreamCut(ErrorDetail::caused_by(message, error))
        }
        OpenAIError::InvalidArgument(message) => LlmError::config(bounded(message)),
        // An error answer `KeepRetryAfter` read, with the server's pause.
        OpenAIError::Boxed(error) => match error.downcast::<RetryAfterAnswer>() {
            Ok(answer) => LlmError::Api {
                status: Some(answer.status),
                message: bounded(answer.message),
                retry_after: Some(answer.retry_after),
            },
            Err(error) => LlmError::other(OpenAIError::Boxed(error)),
        },
        other => LlmError::other(other),
    }
}

/// An error's message with its causes (see [`crate::transport::error_text`]).
fn chain(error: &(dyn StdError + 'static)) -> String {
    crate::transport::error_text(error)
}

/// Blanks the team's API key out of error messages, in case a server echoes it (as the
/// default client does with its own key).
pub(super) struct Scrubber {
    key: Option<SecretString>,
}

impl Scrubber {
    /// A scrubber of `key` (keys under 4 characters are never looked for).
    pub(super) fn new(key: &SecretString) -> Self {
        let key = (key.expose_secret().len() >= 4).then(|| key.clone());
        Self { key }
    }

    /// `error` with the key blanked out of its message.
    pub(super) fn error(&self, error: LlmError) -> LlmError {
        match &self.key {
            Some(key) => crate::transport::scrub::scrub_error(key.expose_secret(), error),
            None => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_answer_without_a_body_still_says_what_happened() {
        let LlmError::Api {
            status, message, ..
        } = unread_error_answer(String::new())
        else {
            panic!("not an API error");
        };
        assert_eq!(status, None);
        assert!(message.contains("empty body"), "{message}");

        let LlmError::Api { message, .. } =
            unread_error_answer(r#"{"object":"error","message":"model not found"}"#.to_owned())
        else {
            panic!("not an API error");
        };
        assert_eq!(message, "model not found");
    }
}

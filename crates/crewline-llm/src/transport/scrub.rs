//! Blanks an API key out of error messages, in case a server echoes it: both clients' one
//! scrubber.

use crate::LlmError;

/// `error` with `key` blanked out of its message (keys under 4 characters are never looked
/// for: they would blank ordinary words).
pub(crate) fn scrub_error(key: &str, error: LlmError) -> LlmError {
    if key.len() < 4 {
        return error;
    }
    let scrub = |message: String| {
        if message.contains(key) {
            message.replace(key, "<redacted>")
        } else {
            message
        }
    };
    match error {
        LlmError::Api {
            status,
            message,
            retry_after,
        } => LlmError::Api {
            status,
            message: scrub(message),
            retry_after,
        },
        LlmError::Connect(d) => LlmError::Connect(d.map_message(scrub)),
        LlmError::StreamCut(d) => LlmError::StreamCut(d.map_message(scrub)),
        LlmError::InvalidResponse(d) => LlmError::InvalidResponse(d.map_message(scrub)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorDetail;

    #[test]
    fn echoed_keys_are_scrubbed_from_every_message_kind() {
        let key = "sk-secret-123456";
        let said = format!("Incorrect API key provided: {key}");
        for error in [
            LlmError::Api {
                status: Some(401),
                message: said.clone(),
                retry_after: None,
            },
            LlmError::Connect(ErrorDetail::new(said.clone())),
            LlmError::StreamCut(ErrorDetail::new(said.clone())),
            LlmError::InvalidResponse(ErrorDetail::new(said)),
        ] {
            // What a log line or the platform's `agent.error` shows: the chain.
            let scrubbed = crewline_core::error_chain(&scrub_error(key, error));
            assert!(!scrubbed.contains("sk-secret"), "{scrubbed}");
            assert!(scrubbed.contains("<redacted>"), "{scrubbed}");
        }
        let short = scrub_error("ab", LlmError::config("ab ab".to_owned()));
        assert_eq!(
            crewline_core::error_chain(&short),
            crewline_core::error_chain(&LlmError::config("ab ab".to_owned()))
        );
    }

    #[test]
    fn a_scrubbed_cause_is_printed_once_and_never_raw() {
        let key = "sk-secret-123456";
        let raw = std::io::Error::other(format!("refused {key}"));
        let error = LlmError::Connect(ErrorDetail::caused_by(format!("refused {key}"), raw));
        assert_eq!(error.to_string(), "could not reach the LLM server");
        assert_eq!(
            crewline_core::error_chain(&scrub_error(key, error)),
            "could not reach the LLM server: refused <redacted>"
        );
    }
}

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
            let scrubbed = scrub_error(key, error);
            assert!(!scrubbed.to_string().contains("sk-secret"), "{scrubbed}");
            assert!(scrubbed.to_string().contains("<redacted>"), "{scrubbed}");
        }
        let short = scrub_error("ab", LlmError::Config("ab ab".to_owned()));
        assert_eq!(
            short.to_string(),
            LlmError::Config("ab ab".to_owned()).to_string()
        );
    }
}

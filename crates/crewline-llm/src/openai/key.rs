//! The client's API key: kept secret, and scrubbed from the errors a server may echo it in.

use std::{fmt, sync::Arc};

use secrecy::{ExposeSecret, SecretString};

use crate::LlmError;

/// An API key that never shows in `Debug` output and is zeroed in memory when dropped; shared
/// by a client's clones and its answers' readers.
#[derive(Clone)]
pub(super) struct ApiKey(pub(super) Arc<SecretString>);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl ApiKey {
    /// `message` with the key blanked out, in case a server echoes it in an error.
    fn scrub(&self, message: String) -> String {
        let key = self.0.expose_secret();
        if key.len() >= 4 && message.contains(key) {
            message.replace(key, "<redacted>")
        } else {
            message
        }
    }

    pub(super) fn scrub_error(&self, error: LlmError) -> LlmError {
        match error {
            LlmError::Api {
                status,
                message,
                retry_after,
            } => LlmError::Api {
                status,
                message: self.scrub(message),
                retry_after,
            },
            LlmError::Connect(d) => LlmError::Connect(d.map_message(|m| self.scrub(m))),
            LlmError::StreamCut(d) => LlmError::StreamCut(d.map_message(|m| self.scrub(m))),
            LlmError::InvalidResponse(d) => {
                LlmError::InvalidResponse(d.map_message(|m| self.scrub(m)))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_keys_are_scrubbed_from_errors() {
        let key = ApiKey(Arc::new(SecretString::from("sk-secret-123456")));
        let error = key.scrub_error(LlmError::Api {
            status: Some(401),
            message: "Incorrect API key provided: sk-secret-123456".to_owned(),
            retry_after: None,
        });
        assert!(!error.to_string().contains("sk-secret"), "{error}");
    }
}

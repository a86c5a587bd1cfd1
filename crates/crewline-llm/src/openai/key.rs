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
    /// `error` with the key blanked out of its message, in case a server echoes it.
    pub(super) fn scrub_error(&self, error: LlmError) -> LlmError {
        crate::transport::scrub::scrub_error(self.0.expose_secret(), error)
    }
}

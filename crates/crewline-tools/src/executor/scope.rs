//! Whose calls these are: the session scope carried on every call's [`CallContext`].
//!
//! A scope names one conversation with one caller: a voice call, an MCP session, a remote
//! task. Whoever owns the session mints it once ([`SessionScope::new`]) and passes it on every
//! turn's context. The executor keys what it keeps between calls by it: cached results,
//! approvals, and non-cancellable calls still running, so nothing one caller caused or saw is
//! ever served to another.
//!
//! [`CallContext`]: super::CallContext

use std::{fmt, sync::Arc};

/// An opaque key naming one session; cloning shares it, [`new`](Self::new) mints a fresh one.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionScope(Arc<str>);

impl SessionScope {
    /// A fresh scope, unlike every other (random: it cannot be guessed or repeated).
    pub fn new() -> Self {
        Self(format!("ses_{}", uuid::Uuid::new_v4().simple()).into())
    }

    /// The scope of the call the platform names `call_id` (`session_context.caller.call_id`,
    /// or a key the crew provides): a reconnect with the same id, on any replica, is the same
    /// call, so what the executor keeps for it (running tools, their outcomes, approvals)
    /// carries over. Only the platform, which holds the crew's token, names calls.
    pub fn for_call(call_id: &str) -> Self {
        Self(format!("call:{call_id}").into())
    }

    /// The scope whose key is `key`, as [`as_str`](Self::as_str) gave it: for an approver or a
    /// store that keeps a request's scope outside the process and reads it back. Two scopes
    /// with one key are one session, so pass only keys a scope gave.
    pub fn from_key(key: &str) -> Self {
        Self(key.into())
    }

    /// The scope's key, for logs and for approvers that show it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for SessionScope {
    /// A fresh scope: a context that names no session shares nothing with any other.
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SessionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SessionScope").field(&&*self.0).finish()
    }
}

impl fmt::Display for SessionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_scopes_differ_and_clones_are_equal() {
        let a = SessionScope::new();
        assert_ne!(a, SessionScope::new());
        assert_eq!(
            SessionScope::from_key(a.as_str()),
            a,
            "a key read back is the same scope"
        );
        assert_eq!(a, a.clone());
        assert!(a.as_str().starts_with("ses_"));
        assert_eq!(SessionScope::for_call("c1"), SessionScope::for_call("c1"));
        assert_ne!(SessionScope::for_call("c1"), SessionScope::for_call("c2"));
        assert_ne!(
            SessionScope::for_call("c1").as_str(),
            a.as_str(),
            "a call's scope never equals a fresh one"
        );
    }
}

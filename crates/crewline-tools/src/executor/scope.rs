//! Whose calls these are: the session scope carried on every call's [`CallContext`].
//!
//! A scope names one conversation with one caller: a voice call, an MCP session, a remote
//! task. Whoever owns the session mints it once ([`SessionScope::new`]) and passes it on every
//! turn's context. The executor keys what it keeps between calls by it: cached results,
//! approvals, and non-cancellable calls still running, so nothing one caller caused or saw is
//! ever served to another.
//!
//! A scope may also name who serves the session ([`SessionScope::with_detached_tasks`]): the
//! non-cancellable tools its calls leave running are that owner's to wait for on shutdown.
//!
//! [`CallContext`]: super::CallContext

use std::{cmp::Ordering, fmt, hash, sync::Arc};

use super::{detached_tasks::DetachedTasks, progress::ToolNotices};

/// An opaque key naming one session; cloning shares it, [`new`](Self::new) mints a fresh one.
///
/// Two scopes with one key are one session (equal, hashed and ordered by the key alone),
/// whoever tracks their tasks.
#[derive(Clone)]
pub struct SessionScope {
    key: Arc<str>,
    /// Where the session's detached tools are tracked; `None`: its owner named none.
    tasks: DetachedTasks,
    /// Where the session's tools report progress and background results; `None`: nowhere.
    notices: Option<ToolNotices>,
}

impl SessionScope {
    /// A fresh scope, unlike every other (random: it cannot be guessed or repeated).
    pub fn new() -> Self {
        Self::keyed(format!("ses_{}", uuid::Uuid::new_v4().simple()).into())
    }

    /// The scope `key`, tracking nothing of its own yet.
    fn keyed(key: Arc<str>) -> Self {
        Self {
            key,
            tasks: DetachedTasks::new(),
            notices: None,
        }
    }

    /// The same scope, whose calls track the tools they leave running (non-cancellable tools
    /// whose caller stopped waiting) in `tasks`: whoever serves the session (a crew server)
    /// passes its own set here and waits for it, and only it, on shutdown.
    ///
    /// Without it, such tasks go to a set of the scope's own, which no server waits for: its
    /// user may wait for them there ([`detached_tasks`](Self::detached_tasks)).
    pub fn with_detached_tasks(mut self, tasks: DetachedTasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// The same scope, whose tools report progress to `notices` and whose
    /// [`background`](crate::ToolPolicy::background) tools run as tasks of the session that
    /// deliver their results there (see [`progress`](super::progress)).
    pub fn with_tool_notices(mut self, notices: ToolNotices) -> Self {
        self.notices = Some(notices);
        self
    }

    /// Where the session's tools report progress and background results, if anywhere.
    pub fn tool_notices(&self) -> Option<&ToolNotices> {
        self.notices.as_ref()
    }

    /// Where this session's calls track the tools they leave running.
    pub fn detached_tasks(&self) -> &DetachedTasks {
        &self.tasks
    }

    /// The scope of the call the platform names `call_id` (`session_context.caller.call_id`,
    /// or a key the crew provides): a reconnect with the same id, on any replica, is the same
    /// call, so what the executor keeps for it (running tools, their outcomes, approvals)
    /// carries over. Only the platform, which holds the crew's token, names calls.
    pub fn for_call(call_id: &str) -> Self {
        Self::keyed(format!("call:{call_id}").into())
    }

    /// The scope whose key is `key`, as [`as_str`](Self::as_str) gave it: for an approver or a
    /// store that keeps a request's scope outside the process and reads it back. Two scopes
    /// with one key are one session, so pass only keys a scope gave.
    pub fn from_key(key: &str) -> Self {
        Self::keyed(key.into())
    }

    /// The scope's key, for logs and for approvers that show it.
    pub fn as_str(&self) -> &str {
        &self.key
    }
}

impl PartialEq for SessionScope {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for SessionScope {}

impl hash::Hash for SessionScope {
    fn hash<H: hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl PartialOrd for SessionScope {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SessionScope {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
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
        f.debug_tuple("SessionScope").field(&&*self.key).finish()
    }
}

impl fmt::Display for SessionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
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

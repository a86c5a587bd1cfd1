//! Wake-ups: one pub/sub subscription per store routes "task changed" messages to the local
//! waiters of that task (long polls, calls waiting for an answer), which then read the task
//! again. Nothing waits on a timer for another replica.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use crate::primary::Primary;
use futures::StreamExt;
use tokio::sync::watch;

/// The local waiters, per task.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    tasks: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        // Every update is one insert or remove: a poisoned lock still holds consistent data.
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts watching task `id`: the watch fires on every later change of it.
    pub(crate) fn watch(self: &Arc<Self>, id: &str) -> Watch {
        let receiver = self
            .lock()
            .entry(id.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Watch {
            receiver: Some(receiver),
            waiters: Arc::clone(self),
            id: id.to_owned(),
        }
    }

    /// Wakes the waiters of task `id`, if it has any here.
    pub(crate) fn wake(&self, id: &str) {
        if let Some(sender) = self.lock().get(id) {
            sender.send_modify(|version| *version += 1);
        }
    }

    /// Wakes every waiter, to look again after messages may have been missed.
    pub(crate) fn wake_all(&self) {
        for sender in self.lock().values() {
            sender.send_modify(|version| *version += 1);
        }
    }

    /// How many tasks have local waiters.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A waiter's view of one task's changes; leaves the map with its last watcher.
#[derive(Debug)]
pub(crate) struct Watch {
    receiver: Option<watch::Receiver<u64>>,
    waiters: Arc<Waiters>,
    id: String,
}

impl Watch {
    /// Marks every change so far as seen (call before reading the task).
    pub(crate) fn seen(&mut self) {
        if let Some(receiver) = &mut self.receiver {
            receiver.borrow_and_update();
        }
    }

    /// Waits for a change not yet seen.
    pub(crate) async fn changed(&mut self) {
        match &mut self.receiver {
            // The sender stays in the map while this receiver lives: no error can come.
            Some(receiver) => {
                let _ = receiver.changed().await;
            }
            None => std::future::pending().await,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut tasks = self.waiters.lock();
        if tasks
            .get(&self.id)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            tasks.remove(&self.id);
        }
    }
}

/// The shortest and longest pause before subscribing again after the subscription was lost.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Subscribes to `channel` on a connection of its own (with a bounded connect time).
pub(crate) async fn subscribe(
    primary: &Primary,
    channel: &str,
    connect_timeout: Duration,
) -> redis::RedisResult<redis::aio::PubSub> {
    // The primary now: after a Sentinel failover, the new one.
    let client = primary.client().await?;
    let connecting = tokio::time::timeout(connect_timeout, client.get_async_pubsub());
    let mut pubsub = match connecting.await {
        Ok(pubsub) => pubsub?,
        Err(_) => {
            return Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connecting for wake-ups timed out",
            )));
        }
    };
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}

/// How often a quiet subscription is checked with a `PING`, and how long its answer may take:
/// a connection that died without closing (a network partition) is noticed, and replaced.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Routes the messages of `pubsub` (subscribed to `channel`) to `waiters` until the store is
/// dropped; when the subscription is lost, subscribes again with backoff and wakes every
/// waiter, since a message may have been missed meanwhile.
pub(crate) async fn route(
    primary: Primary,
    channel: String,
    target: String,
    connect_timeout: Duration,
    mut pubsub: redis::aio::PubSub,
    waiters: Weak<Waiters>,
) {
    loop {
        if !listen(pubsub, &waiters).await {
            return;
        }
        tracing::warn!(redis = %target, "the task store lost its wake-up subscription; subscribing again");
        let mut pause = RETRY_MIN;
        pubsub = loop {
            if waiters.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(pause).await;
            match subscribe(&primary, &channel, connect_timeout).await {
                Ok(pubsub) => break pubsub,
                Err(error) => {
                    tracing::debug!(redis = %target, error = %crewline::types::ErrorChain(&error), "subscribing for wake-ups failed");
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        };
        tracing::info!(redis = %target, "the task store's wake-up subscription is back");
        match waiters.upgrade() {
            Some(waiters) => waiters.wake_all(),
            None => return,
        }
    }
}

/// Wakes `waiters` for each message of `pubsub`; whether it returned because the
/// subscription was lost (`false`: the store is gone).
async fn listen(pubsub: redis::aio::PubSub, waiters: &Weak<Waiters>) -> bool {
    let (mut sink, mut messages) = pubsub.split();
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    keepalive.tick().await;
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else { return true };
                let Some(waiters) = waiters.upgrade() else { return false };
                match message.get_payload::<String>() {
                    Ok(id) => waiters.wake(&id),
                    Err(error) => tracing::debug!(error = %crewline::types::ErrorChain(&error), "a wake-up without a task id"),
                }
            }
            _ = keepalive.tick() => {
                let ping = tokio::time::timeout(KEEPALIVE_TIMEOUT, sink.ping::<redis::Value>());
                if !matches!(ping.await, Ok(Ok(_))) {
                    return true;
                }
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_the_tasks_waiters_and_the_last_one_out_cleans_up() {
        let waiters = Arc::new(Waiters::default());
        let mut first = waiters.watch("task_1");
        let mut second = waiters.watch("task_1");
        let mut other = waiters.watch("task_2");
        first.seen();
        second.seen();
        other.seen();
        waiters.wake("task_1");
        first.changed().await;
        second.changed().await;
        let other_woken = tokio::time::timeout(Duration::from_millis(20), other.changed());
        assert!(
            other_woken.await.is_err(),
            "another task's waiter sleeps on"
        );
        waiters.wake_all();
        other.changed().await;
        drop((first, other));
        assert_eq!(waiters.len(), 1, "task_1 still has a waiter");
        drop(second);
        assert_eq!(waiters.len(), 0);
    }
}

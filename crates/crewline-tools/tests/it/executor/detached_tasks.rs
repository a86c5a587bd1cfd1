//! Tools left running are tracked by whoever serves their session: waiting for one owner's
//! tasks neither waits for nor stops another's.

use super::*;
use crewline_tools::{DetachedTasks, SessionScope};

#[tokio::test]
async fn an_owner_waits_for_its_own_detached_tools_only() {
    let release = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let paid = Arc::new(AtomicBool::new(false));
    let (gate, signal, done) = (
        Arc::clone(&release),
        Arc::clone(&started),
        Arc::clone(&paid),
    );
    let payment = tool("pay", ToolPolicy::new().cancellable(false), move |_| {
        let (gate, signal, done) = (Arc::clone(&gate), Arc::clone(&signal), Arc::clone(&done));
        async move {
            signal.notify_one();
            gate.notified().await;
            done.store(true, Ordering::SeqCst);
            Ok(json!("paid"))
        }
    });
    let registry = registry(Executor::builder().build(), [payment]);
    let (mine, theirs) = (DetachedTasks::new(), DetachedTasks::new());
    let context = registry
        .context()
        .with_scope(SessionScope::new().with_detached_tasks(mine.clone()));
    let the_call = call("p1", "pay", "{}");
    tokio::select! {
        _ = run_one(&registry, &the_call, &context) => panic!("finished early"),
        // The caller stops waiting (a barge-in): the payment runs on, tracked by its owner.
        () = started.notified() => {}
    }
    assert_eq!(mine.len(), 1, "the running payment is its owner's");
    assert!(theirs.is_empty(), "another owner tracks nothing of it");

    // Another owner's shutdown does not wait for the payment...
    within(theirs.wait()).await;
    // ...nor stop it: it is still running, and ends when released.
    assert!(!paid.load(Ordering::SeqCst));
    assert_eq!(mine.len(), 1);
    release.notify_one();
    within(mine.wait()).await;
    assert!(paid.load(Ordering::SeqCst), "the payment ran to its end");
}

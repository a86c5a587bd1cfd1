//! A barge-in drops the synthesis and the playback: their processes must be gone at once.
//!
//! A file of its own, so that no other test's child processes run in this process while it
//! counts them. The espeak-ng test, like `espeak.rs`, passes with a note where espeak-ng is
//! missing, unless `CREWLINE_REQUIRE_ESPEAK=1`. The others stand in a program that neither
//! reads nor writes (so a closed pipe cannot end it): only the kill on drop can.

// A binary of its own, not in tests/it: it counts the process's espeak-ng children, which
// the espeak tests in tests/it would add to.

use std::{path::PathBuf, time::Duration};

use crewline_speech::{Aplay, Audio, AudioFormat, AudioPlayer, EspeakNg, TextToSpeech};

#[path = "it/common/mod.rs"]
mod common;
use common::espeak_available;

#[tokio::test]
async fn dropping_the_synthesis_kills_espeak() {
    if !espeak_available().await {
        return;
    }
    // A long text takes espeak-ng a while; the timeout drops the future part-way.
    let text = "This sentence goes on and on. ".repeat(400);
    let engine = EspeakNg::new();
    let dropped = tokio::time::timeout(Duration::from_millis(20), engine.synthesize(&text)).await;
    assert!(
        dropped.is_err(),
        "the synthesis should still have been running"
    );
    assert_eq!(
        children_after_drop("espeak-ng").await,
        0,
        "espeak-ng still running after the drop"
    );
}

/// A script standing in for espeak-ng and aplay: it becomes `sleep 30`, silent on its pipes.
fn stuck_program(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crewline-stuck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let path = dir.join(name);
    std::fs::write(&path, "#!/bin/sh\nexec sleep 30\n").expect("the script");
    let mut permissions = std::fs::metadata(&path)
        .expect("its metadata")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&path, permissions).expect("made executable");
    // A script just written can fail to start (ETXTBSY) while a fork made meanwhile by another
    // test thread still holds its write descriptor: start it once, retrying, then stop it.
    for _ in 0..200 {
        if let Ok(mut child) = std::process::Command::new(&path).spawn() {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    path
}

#[tokio::test]
async fn dropping_a_stuck_synthesis_or_playback_kills_its_process() {
    let engine = EspeakNg::with_program(stuck_program("fake-espeak"));
    let synthesis = tokio::time::timeout(Duration::from_millis(300), engine.synthesize("Hi."));
    assert!(synthesis.await.is_err(), "the stand-in never answers");
    assert_eq!(
        children_after_drop("sleep").await,
        0,
        "synthesis not killed"
    );

    let player = Aplay::with_program(stuck_program("fake-aplay"));
    let audio = Audio::new(AudioFormat::mono(8000), vec![0; 800]);
    let playback = tokio::time::timeout(Duration::from_millis(300), player.play(&audio));
    assert!(playback.await.is_err(), "the stand-in never ends");
    assert_eq!(children_after_drop("sleep").await, 0, "playback not killed");
}

/// Waits up to 2 s for this process's live `name` children to go; returns how many are left.
async fn children_after_drop(name: &str) -> usize {
    let mut ours = 0;
    for _ in 0..100 {
        ours = count_children(name);
        if ours == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ours
}

/// How many live (not zombie) children of this process run `name`, from /proc.
fn count_children(name: &str) -> usize {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid ...
            let Some((comm, rest)) = stat.split_once(") ") else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let ppid = fields.next();
            comm.ends_with(&format!("({name}")) && ppid == Some(me.as_str()) && state != Some("Z")
        })
        .count()
}

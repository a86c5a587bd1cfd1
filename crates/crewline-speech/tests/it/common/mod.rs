//! Scaffolding shared by the espeak-ng integration tests.

use crewline_speech::EspeakNg;

/// Whether espeak-ng can run here; panics if it cannot and CI requires it
/// (`CREWLINE_REQUIRE_ESPEAK=1`), so a missing program cannot pass CI silently.
pub(crate) async fn espeak_available() -> bool {
    match EspeakNg::new().probe().await {
        Ok(_) => true,
        Err(error) => {
            let required = std::env::var("CREWLINE_REQUIRE_ESPEAK").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "CREWLINE_REQUIRE_ESPEAK=1 but espeak-ng cannot run: {error}"
            );
            // Past the test harness's capture, so that every run shows what it skipped.
            {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: espeak-ng not available ({error}); skipping"
                );
            }
            false
        }
    }
}

//! Log capture for tests that assert on what a process logs (that no secret or whole payload
//! reaches a log line).

use std::sync::{Mutex, OnceLock, PoisonError};

/// Every log line of this process, captured in memory by a global `tracing` subscriber.
///
/// There is one subscriber per process, so the first [`CapturedLogs::install`] sets it up and
/// later calls return the same capture (their filter is ignored): give every test of a test
/// binary the same filter.
///
/// # Examples
///
/// ```
/// let logs = crewline_testkit::CapturedLogs::install("info");
/// tracing::info!("the crew is ready");
/// assert!(logs.text().contains("the crew is ready"));
/// ```
#[derive(Debug)]
pub struct CapturedLogs {
    bytes: Mutex<Vec<u8>>,
}

/// The writer the subscriber formats into.
struct Capture(&'static CapturedLogs);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLogs {
    /// Installs the capturing subscriber (once per process) with this `EnvFilter` directive,
    /// e.g. `"trace,rmcp=info"`, without colours; returns the capture.
    ///
    /// If another global subscriber was installed first, nothing is captured (a warning says
    /// so).
    pub fn install(filter: &str) -> &'static Self {
        static LOGS: OnceLock<&'static CapturedLogs> = OnceLock::new();
        LOGS.get_or_init(|| {
            let logs: &'static Self = Box::leak(Box::new(Self {
                bytes: Mutex::new(Vec::new()),
            }));
            let installed = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(false)
                .with_writer(move || Capture(logs))
                .try_init();
            if let Err(error) = installed {
                tracing::warn!(error = %crewline::types::ErrorChain(&*error), "another subscriber is installed: no logs are captured");
            }
            logs
        })
    }

    /// Everything logged so far, as text.
    pub fn text(&self) -> String {
        let bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

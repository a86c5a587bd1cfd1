//! [`init_logs`]: a crew binary's logs on stderr, and its turns traced over OpenTelemetry
//! when the environment asks (feature `otel`).

/// Logs to stderr at `default_filter` (e.g. `info`) unless `RUST_LOG` says otherwise; stderr
/// keeps stdout for what a program prints for scripts. With `OTEL_EXPORTER_OTLP_ENDPOINT` (or
/// `..._TRACES_ENDPOINT`) set, each turn is also traced over OTLP ([`crewline_otel`]); keep
/// the returned guard until the program ends, so the last spans are sent.
///
/// A bad OpenTelemetry setting is logged and tracing stays off: the crew still serves.
pub fn init_logs(default_filter: &str) -> Logs {
    use tracing_subscriber::{Layer, layer::SubscriberExt, util::SubscriberInitExt};

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    let (telemetry, refused) = match crewline_otel::Telemetry::from_env() {
        Ok(telemetry) => (telemetry, None),
        Err(error) => (None, Some(error)),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colour codes only for a person at a terminal, never into a file or a pipe.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(filter),
        )
        .with(telemetry.as_ref().map(crewline_otel::Telemetry::layer))
        .init();
    if let Some(error) = refused {
        tracing::error!(error = %crewline::types::ErrorChain(&error), "OpenTelemetry tracing is off");
    } else if telemetry.is_some() {
        tracing::info!("OpenTelemetry tracing on: one trace per turn over OTLP");
    }
    Logs { telemetry }
}

/// Keeps tracing going; dropping it sends the spans still buffered.
#[must_use = "dropping the guard stops tracing: hold it until the program ends"]
#[derive(Debug)]
pub struct Logs {
    telemetry: Option<crewline_otel::Telemetry>,
}

impl Drop for Logs {
    fn drop(&mut self) {
        if let Some(telemetry) = self.telemetry.take() {
            telemetry.shutdown();
        }
    }
}

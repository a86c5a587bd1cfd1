//! OpenTelemetry traces of crewline calls over OTLP, off unless configured.
//!
//! Each turn is one trace, so one slow turn can be found among thousands of calls on several
//! replicas: its root span `crewline.turn` carries the platform's call id (`call_id`), the
//! turn's request id (`request_id`, the `request_id` of `agent.llm.response.start`) and the
//! node; below it, each LLM request (`llm.request`, with `time_to_first_token_ms`) and each
//! tool call (`tool.call`, with the tool, the call id and the error kind when it failed). The
//! call's `session` span is linked from every turn.
//!
//! Configuration is OpenTelemetry's own: [`Telemetry::from_env`] turns tracing on when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and neither
//! `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise); the exporter reads
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `http/json`), `_HEADERS`
//! and `_TIMEOUT`, and the resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
//! Spans leave from a background thread in batches: a turn never waits on the collector.
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//!
//! let telemetry = crewline_otel::Telemetry::from_env()?; // None when not configured
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(telemetry.as_ref().map(crewline_otel::Telemetry::layer))
//!     .init();
//! // ... serve ...
//! if let Some(telemetry) = telemetry {
//!     telemetry.shutdown(); // sends what is still buffered
//! }
//! # Ok::<(), crewline_otel::TelemetryError>(())
//! ```

use std::{env, fmt, time::Duration};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::{
    Layer,
    filter::{FilterFn, Filtered},
    registry::LookupSpan,
};

/// The service name traces carry when `OTEL_SERVICE_NAME` does not say.
pub const DEFAULT_SERVICE_NAME: &str = "crewline";

/// How long [`Telemetry::shutdown`] waits for the last spans to leave.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The crates whose spans are exported (each turn's spans come from these).
const CREWLINE_TARGETS: [&str; 7] = [
    "crewline",
    "crewline_llm",
    "crewline_tools",
    "crewline_server",
    "crewline_remote",
    "crewline_mcp",
    "crewline_examples",
];

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` asks for a protocol this build does not export.
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not supported: crewline exports over OTLP/HTTP, \
         use `http/protobuf` (the default) or `http/json`"
    )]
    UnsupportedProtocol(String),
    /// The exporter could not be built (an invalid endpoint or header).
    #[error("the OTLP exporter could not be built")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The OTLP wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OtlpProtocol {
    /// `http/protobuf`, OTLP's default.
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

impl OtlpProtocol {
    fn sdk(self) -> Protocol {
        match self {
            Self::HttpProtobuf => Protocol::HttpBinary,
            Self::HttpJson => Protocol::HttpJson,
        }
    }

    /// The protocol `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`
    /// names (the former wins), if any.
    fn from_env() -> Result<Option<Self>, TelemetryError> {
        let Some(value) = env_value("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env_value("OTEL_EXPORTER_OTLP_PROTOCOL"))
        else {
            return Ok(None);
        };
        match value.trim() {
            "http/protobuf" => Ok(Some(Self::HttpProtobuf)),
            "http/json" => Ok(Some(Self::HttpJson)),
            other => Err(TelemetryError::UnsupportedProtocol(other.to_owned())),
        }
    }
}

/// A set variable's value; unset and empty are the same (as the OpenTelemetry spec says).
fn env_value(name: &str) -> Option<String> {
    env::var(name).ok().filter(|value| !value.trim().is_empty())
}

/// Traces going out over OTLP: the layer to add to the subscriber, and the exporter behind it.
///
/// Dropping it without [`shutdown`](Self::shutdown) loses what is still buffered.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Tracing as the `OTEL_*` variables configure it, or `None` when they do not turn it on.
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        let disabled = env_value("OTEL_SDK_DISABLED").is_some_and(|v| v.trim() == "true")
            || env_value("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
        let configured = env_value("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || env_value("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        if disabled || !configured {
            return Ok(None);
        }
        let protocol = OtlpProtocol::from_env()?.unwrap_or(OtlpProtocol::HttpProtobuf);
        // The exporter reads the endpoint, headers and timeout variables itself.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol.sdk())
            .build()?;
        Ok(Some(Self::with_exporter(exporter)))
    }

    /// Tracing to the OTLP/HTTP traces endpoint `endpoint` (e.g.
    /// `http://127.0.0.1:4318/v1/traces`), whatever the environment says.
    pub fn to_endpoint(
        endpoint: impl Into<String>,
        protocol: OtlpProtocol,
    ) -> Result<Self, TelemetryError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .with_protocol(protocol.sdk())
            .build()?;
        Ok(Self::with_exporter(exporter))
    }

    fn with_exporter(exporter: opentelemetry_otlp::SpanExporter) -> Self {
        let mut resource = Resource::builder();
        if env_value("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Self { provider }
    }

    /// The `tracing` layer that turns crewline's spans into OpenTelemetry spans.
    ///
    /// It sees crewline's spans at every level (each turn's spans are `debug`) and, of events,
    /// warnings and errors only, whatever the log filter says; without this layer those debug
    /// spans are never built.
    pub fn layer<S>(&self) -> Filtered<impl Layer<S> + use<S>, FilterFn, S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        let tracer = self.provider.tracer("crewline");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_filter(FilterFn::new(exported as fn(&Metadata<'_>) -> bool))
    }

    /// Sends the spans still buffered (waiting up to [`SHUTDOWN_TIMEOUT`]).
    pub fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!(%error, "OpenTelemetry spans could not all be sent");
        }
    }

    /// Sends what is still buffered and stops the exporter.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(%error, "OpenTelemetry exporter did not shut down cleanly");
        }
    }
}

/// What the OpenTelemetry layer sees: crewline's spans at any level, warnings and errors.
fn exported(metadata: &Metadata<'_>) -> bool {
    if metadata.is_span() {
        let target = metadata.target();
        CREWLINE_TARGETS.iter().any(|crate_name| {
            target == *crate_name
                || target
                    .strip_prefix(crate_name)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
    } else {
        *metadata.level() <= Level::WARN
    }
}

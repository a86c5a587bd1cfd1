//! What an MCP client sends, screened before rmcp sees it: rmcp logs every notification a
//! client sends whole at INFO ("received notification"), the client's handshake at INFO
//! ("Service initialized as server"), and the id and error of every request it fails at WARN
//! ("response error", whose error repeats an unknown method's name). A token holder could
//! otherwise write a megabyte log line (up to `max_request_bytes`) into the server's logs with
//! every message. The same bound as the client's (`Screened` in `client.rs`).

use axum::{
    Json,
    body::{Body, Bytes},
    extract::Request,
    http::{Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::{
    ErrorData, RoleServer,
    model::{ClientJsonRpcMessage, ClientRequest, JsonRpcError, JsonRpcMessage, RequestId},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};

/// The most bytes of a client's notification, or of a request other than `tools/call`, that
/// reach rmcp. Real ones are a few hundred bytes (an `initialize` with its client's name and
/// capabilities, a `notifications/cancelled` with its reason).
pub(super) const MAX_MESSAGE_BYTES: usize = 4 << 10;

/// The most bytes of a request's id (as JSON): JSON-RPC ids are numbers or short strings
/// (a UUID is 38 bytes as JSON).
pub(super) const MAX_ID_BYTES: usize = 256;

/// The most bytes of a header rmcp reads and logs whole when it refuses it (a malformed or
/// disallowed `Host` or `Origin`, a mismatched `MCP-Protocol-Version`, an unknown
/// `Mcp-Session-Id` or `Last-Event-ID`): real values are a host name, a UUID, a short id.
pub(super) const MAX_HEADER_BYTES: usize = 1024;

/// The headers rmcp may log whole.
const LOGGED_HEADERS: [&str; 5] = [
    "host",
    "origin",
    "mcp-protocol-version",
    "mcp-session-id",
    "last-event-id",
];

/// What the refused client reads.
const REFUSAL: &str = "the request is larger than this MCP server takes: at most 4 KiB for a \
                       request other than tools/call, and 256 bytes for its id";

/// What becomes of one message from a client.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Handed to rmcp as it is.
    Pass,
    /// A notification too large: dropped (a client expects no answer to it).
    Drop,
    /// A request too large: answered with an error, under its id when the id is small
    /// enough to send back (`None`: the id itself is too large).
    Refuse(Option<RequestId>),
}

/// Judges `message` (see [`MAX_MESSAGE_BYTES`], [`MAX_ID_BYTES`]). A `tools/call` keeps its
/// arguments whatever their size (bounded by the transport: `max_request_bytes` over HTTP):
/// rmcp does not log them, and crewline logs only an excerpt.
fn verdict(message: &ClientJsonRpcMessage) -> Verdict {
    match message {
        JsonRpcMessage::Notification(notification) => {
            if crewline_core::json_len(&notification) > MAX_MESSAGE_BYTES {
                return Verdict::Drop;
            }
            Verdict::Pass
        }
        JsonRpcMessage::Request(request) => {
            if crewline_core::json_len(&request.id) > MAX_ID_BYTES {
                return Verdict::Refuse(None);
            }
            let call = matches!(request.request, ClientRequest::CallToolRequest(_));
            if !call && crewline_core::json_len(&request) > MAX_MESSAGE_BYTES {
                return Verdict::Refuse(Some(request.id.clone()));
            }
            Verdict::Pass
        }
        // Answers to the server's own requests: rmcp logs neither their content nor an
        // unknown id at INFO or above.
        JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => Verdict::Pass,
    }
}

/// The error a refused request is answered with.
fn refusal(id: Option<RequestId>) -> JsonRpcError {
    JsonRpcError::new(id, ErrorData::invalid_request(REFUSAL, None))
}

/// Logs a screened-out message by its size only.
fn note(verdict: &Verdict, bytes: usize) {
    match verdict {
        Verdict::Drop => {
            tracing::debug!(
                bytes,
                "an oversized notification from an MCP client dropped"
            );
        }
        _ => tracing::debug!(bytes, "an oversized request from an MCP client refused"),
    }
}

/// A transport (stdio, a socket) whose incoming messages are screened before rmcp sees them.
pub(super) struct Screened<T> {
    inner: T,
}

impl<T> Screened<T> {
    /// Screens what `inner` receives.
    pub(super) fn new(inner: T) -> Self {
        Self { inner }
    }
}

impl<T> Transport<RoleServer> for Screened<T>
where
    T: Transport<RoleServer>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let message = self.inner.receive().await?;
            let verdict = verdict(&message);
            if verdict == Verdict::Pass {
                return Some(message);
            }
            note(&verdict, crewline_core::json_len(&message));
            if let Verdict::Refuse(Some(id)) = verdict {
                // Sent on its own: `receive` may be dropped at any await (rmcp polls it in a
                // `select!`), and the answer must not be lost with it.
                let send = self.inner.send(JsonRpcMessage::Error(refusal(Some(id))));
                tokio::spawn(async move {
                    if let Err(error) = send.await {
                        tracing::debug!(error = %crewline_core::ErrorChain(&error), "the refusal could not be sent");
                    }
                });
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Screens the body of a POST to the HTTP endpoint (every message of a session, and every
/// stateless request, arrives that way): a notification too large is answered 202 and dropped,
/// a request too large 400 with a JSON-RPC error. The body is read up to `limit` bytes
/// (`max_request_bytes`; past it, 413); one that is not a JSON-RPC message is left to rmcp.
/// A request with a header rmcp may log over [`MAX_HEADER_BYTES`] is answered 400, whatever
/// its method.
pub(super) async fn screen_http(limit: usize, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let oversized = LOGGED_HEADERS.iter().find(|name| {
        headers
            .get_all(**name)
            .iter()
            .any(|value| value.len() > MAX_HEADER_BYTES)
    });
    if let Some(name) = oversized {
        tracing::debug!(
            header = name,
            "an MCP request with an oversized header refused"
        );
        let reason = format!("the {name} header is over {MAX_HEADER_BYTES} bytes");
        return (StatusCode::BAD_REQUEST, reason).into_response();
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        // Past the limit (or the client is gone, and reads nothing).
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "the MCP request body is too large",
        )
            .into_response();
    };
    if let Some(response) = screened_out(&bytes) {
        return response;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The answer to a body screened out, or `None` to let it through.
fn screened_out(bytes: &Bytes) -> Option<Response> {
    let message = serde_json::from_slice::<ClientJsonRpcMessage>(bytes).ok()?;
    let verdict = verdict(&message);
    note(&verdict, bytes.len());
    match verdict {
        Verdict::Pass => None,
        Verdict::Drop => Some(StatusCode::ACCEPTED.into_response()),
        Verdict::Refuse(id) => Some((StatusCode::BAD_REQUEST, Json(refusal(id))).into_response()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn judged(message: serde_json::Value) -> Verdict {
        verdict(&serde_json::from_value(message).expect("a client message"))
    }

    #[test]
    fn a_tool_call_passes_whatever_its_arguments_but_not_with_a_huge_id() {
        let args = json!({"text": "a".repeat(1 << 20)});
        let call = |id: serde_json::Value| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "echo", "arguments": args}})
        };
        assert_eq!(judged(call(json!(7))), Verdict::Pass);
        assert_eq!(judged(call(json!("i".repeat(300)))), Verdict::Refuse(None));
    }

    #[test]
    fn other_requests_and_notifications_are_bounded() {
        let big = "b".repeat(MAX_MESSAGE_BYTES);
        let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
        assert_eq!(judged(ping), Verdict::Pass);
        let custom = json!({"jsonrpc": "2.0", "id": 3, "method": big});
        assert_eq!(judged(custom), Verdict::Refuse(Some(RequestId::Number(3))));
        let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 3, "reason": big}});
        assert_eq!(judged(cancelled), Verdict::Drop);
        let small = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 3, "reason": "barge-in"}});
        assert_eq!(judged(small), Verdict::Pass);
    }
}

//! The socket transport: the WebSocket connection to a crew, its reader and writer tasks.

use std::{sync::Arc, time::Duration};

use crewline::protocol;
use futures::{SinkExt, StreamExt};
use tokio::{
    net::TcpStream,
    sync::{Semaphore, mpsc},
    time::Instant,
};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{
        self, Message as WsMessage,
        client::IntoClientRequest,
        http::{HeaderValue, header::AUTHORIZATION},
    },
};

use super::{FrameTap, Inbound, PlatformConfig, PlatformError, TapDirection};

/// The largest message (or frame) read from a crew: 16 MiB. A crew's largest real frame is an
/// `agent.log` carrying a tool result (1 MiB at most by default); tungstenite's own limits
/// (64 MiB a message) would let any URL the client is pointed at make it hold that much.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The bytes of received frames that may wait for the caller: 64 MiB. Past it the reader stops
/// reading (TCP then holds the crew back) until the caller takes frames, so a crew that sends
/// while nobody reads (between turns) cannot fill memory with the 4,096 frames the queue holds.
pub const INBOUND_BYTES: usize = 64 << 20;

/// The bytes of crew frames one turn may gather: 64 MiB. A [`TurnSummary`](super::TurnSummary)
/// keeps every frame of its turn, so a crew that streams without end (within the turn's
/// timeout) fails the turn with [`PlatformError::TurnTooLarge`] instead of growing it.
pub const MAX_TURN_BYTES: usize = 64 << 20;

/// The longest one frame may take to write; a crew that stops reading cannot hold the writer
/// (and its socket) forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens the TCP connection (with Nagle off, so back-to-back small frames are not held up
/// waiting for an ACK, which would skew the latencies) and upgrades it.
pub async fn open_socket(
    config: &PlatformConfig,
) -> Result<WebSocketStream<TcpStream>, PlatformError> {
    let invalid = |reason: &str| PlatformError::InvalidUrl {
        url: config.url.clone(),
        reason: reason.to_owned(),
    };
    let mut request = config
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| invalid(&e.to_string()))?;
    let uri = request.uri().clone();
    match uri.scheme_str() {
        Some("ws") => {}
        Some("wss") => return Err(invalid("wss:// is not supported; use ws://")),
        _ => return Err(invalid("the scheme must be ws://")),
    }
    let host = uri.host().ok_or_else(|| invalid("no host"))?;
    // A bracketed IPv6 host must lose its brackets for the socket address.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    if let Some(token) = &config.token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| invalid("the token is not a valid header value"))?;
        request.headers_mut().insert(AUTHORIZATION, value);
    }
    let connect_error = |source: tungstenite::Error| match source {
        tungstenite::Error::Http(response) => PlatformError::Refused {
            status: response.status().as_u16(),
        },
        source => PlatformError::Connect {
            url: config.url.clone(),
            source: Box::new(source),
        },
    };
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|e| connect_error(tungstenite::Error::Io(e)))?;
    // Best effort: a socket that refuses the option still works, just with Nagle's delays.
    let _ = tcp.set_nodelay(true);
    // tungstenite zero-fills its whole read buffer (128 KiB by default) on every read; crew
    // frames are small, and a larger one still grows the buffer to fit.
    let config = tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(8 * 1024)
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES));
    let (socket, _response) =
        tokio_tungstenite::client_async_with_config(request, tcp, Some(config))
            .await
            .map_err(connect_error)?;
    Ok(socket)
}

/// Reads frames until the socket ends, stamping each on arrival; frames the caller has not
/// taken yet hold at most `budget` bytes.
pub(super) async fn read_frames(
    mut stream: futures::stream::SplitStream<WebSocketStream<TcpStream>>,
    inbound: mpsc::Sender<Inbound>,
    budget: usize,
    tap: Option<FrameTap>,
) {
    // A frame larger than the whole budget (only with a budget below MAX_MESSAGE_BYTES) takes
    // all of it rather than waiting forever.
    let room = budget;
    let budget = Arc::new(Semaphore::new(budget));
    let closed = loop {
        let item = match stream.next().await {
            Some(Ok(WsMessage::Binary(bytes))) => {
                if let Some(tap) = &tap {
                    tap.see(TapDirection::In, &bytes);
                }
                held(decode(&bytes), bytes.len().min(room), &budget).await
            }
            Some(Ok(WsMessage::Text(text))) => {
                if let Some(tap) = &tap {
                    tap.see(TapDirection::In, text.as_bytes());
                }
                held(decode(text.as_bytes()), text.len().min(room), &budget).await
            }
            Some(Ok(WsMessage::Close(frame))) => {
                break match frame {
                    Some(frame) => Inbound::Closed {
                        code: Some(frame.code.into()),
                        reason: frame.reason.to_string(),
                    },
                    None => Inbound::Closed {
                        code: Some(1005),
                        reason: String::new(),
                    },
                };
            }
            // tungstenite answers pings itself.
            Some(Ok(_)) => continue,
            Some(Err(error)) => {
                tracing::debug!(error = %crewline::types::ErrorChain(&error), "WebSocket read failed");
                break Inbound::Closed {
                    code: None,
                    reason: error.to_string(),
                };
            }
            None => {
                break Inbound::Closed {
                    code: None,
                    reason: String::new(),
                };
            }
        };
        if inbound.send(item).await.is_err() {
            // The client is gone.
            return;
        }
    };
    let _ = inbound.send(closed).await;
}

/// `item` (a frame of `len` bytes) once the budget has room for it, holding its share.
async fn held(mut item: Inbound, len: usize, budget: &Arc<Semaphore>) -> Inbound {
    if let Inbound::Frame(_, _, _, share) = &mut item {
        // `len` is at most the budget, far below u32::MAX; the semaphore is never closed.
        let permits = u32::try_from(len).unwrap_or(u32::MAX);
        *share = Arc::clone(budget).acquire_many_owned(permits).await.ok();
    }
    item
}

/// A frame's bytes as a reader item, stamped now.
pub(crate) fn decode(bytes: &[u8]) -> Inbound {
    let at = Instant::now();
    match protocol::decode(bytes) {
        Ok(event) => Inbound::Frame(at, event, bytes.len(), None),
        Err(error) => Inbound::Undecodable(crewline::types::error_chain(&error)),
    }
}

/// Writes queued frames in order; queuing never blocks, so sending is cancel-safe.
pub(super) async fn write_frames(
    mut sink: futures::stream::SplitSink<WebSocketStream<TcpStream>, WsMessage>,
    mut outbound: mpsc::UnboundedReceiver<WsMessage>,
    tap: Option<FrameTap>,
) {
    while let Some(message) = outbound.recv().await {
        if let Some(tap) = &tap {
            match &message {
                WsMessage::Binary(bytes) => tap.see(TapDirection::Out, bytes),
                WsMessage::Text(text) => tap.see(TapDirection::Out, text.as_bytes()),
                _ => {}
            }
        }
        let is_close = matches!(message, WsMessage::Close(_));
        match tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(error = %crewline::types::ErrorChain(&error), "WebSocket write failed");
                return;
            }
            Err(_) => {
                tracing::warn!("the crew stopped reading; giving up on the socket");
                return;
            }
        }
        if is_close {
            return;
        }
    }
    // The client was dropped without closing: say goodbye properly.
    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.close()).await;
}

//! The socket transport: the WebSocket connection to a crew, its reader and writer tasks.

use std::time::Duration;

use crewline::protocol;
use futures::{SinkExt, StreamExt};
use tokio::{net::TcpStream, sync::mpsc, time::Instant};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{
        self, Message as WsMessage,
        client::IntoClientRequest,
        http::{HeaderValue, header::AUTHORIZATION},
    },
};

use super::{Inbound, PlatformConfig, PlatformError};

/// The longest one frame may take to write; a crew that stops reading cannot hold the writer
/// (and its socket) forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens the TCP connection (with Nagle off, so back-to-back small frames are not held up
/// waiting for an ACK, which would skew the latencies) and upgrades it.
pub(crate) async fn open_socket(
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
    let config = tungstenite::protocol::WebSocketConfig::default().read_buffer_size(8 * 1024);
    let (socket, _response) =
        tokio_tungstenite::client_async_with_config(request, tcp, Some(config))
            .await
            .map_err(connect_error)?;
    Ok(socket)
}

/// Reads frames until the socket ends, stamping each on arrival.
pub(super) async fn read_frames(
    mut stream: futures::stream::SplitStream<WebSocketStream<TcpStream>>,
    inbound: mpsc::Sender<Inbound>,
) {
    let closed = loop {
        let item = match stream.next().await {
            Some(Ok(WsMessage::Binary(bytes))) => decode(&bytes),
            Some(Ok(WsMessage::Text(text))) => decode(text.as_bytes()),
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
                tracing::debug!(%error, "WebSocket read failed");
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

/// A frame's bytes as a reader item, stamped now.
pub(crate) fn decode(bytes: &[u8]) -> Inbound {
    let at = Instant::now();
    match protocol::decode(bytes) {
        Ok(event) => Inbound::Frame(at, event),
        Err(error) => Inbound::Undecodable(error.to_string()),
    }
}

/// Writes queued frames in order; queuing never blocks, so sending is cancel-safe.
pub(super) async fn write_frames(
    mut sink: futures::stream::SplitSink<WebSocketStream<TcpStream>, WsMessage>,
    mut outbound: mpsc::UnboundedReceiver<WsMessage>,
) {
    while let Some(message) = outbound.recv().await {
        let is_close = matches!(message, WsMessage::Close(_));
        match tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, "WebSocket write failed");
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

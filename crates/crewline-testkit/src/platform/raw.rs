//! The platform client's raw layer: a WebSocket to a crew with no protocol on top, for tests
//! of what the server does with frames the platform would never send (a text frame, bytes
//! that are not JSON, an event before `system.init`), of the exact bytes it sends back, of
//! pings and pongs, and of the close code and reason it ends a call with.
//!
//! [`PlatformClient`](super::PlatformClient) plays the platform on top of the same socket
//! (`open_socket`); [`masked_frame`] builds a client frame byte by byte for tests that write
//! to a bare TCP stream.
//!
//! # Examples
//!
//! ```no_run
//! use crewline_testkit::platform::{PlatformConfig, raw::RawSocket};
//!
//! # async fn run() -> Result<(), crewline_testkit::platform::PlatformError> {
//! let mut socket = RawSocket::connect(&PlatformConfig::new("ws://127.0.0.1:8080/ws")).await?;
//! socket.send_text("not an event").await?;
//! let (frames, close) = socket.recv_until_close().await?;
//! tracing::info!(?frames, ?close, "the server's answer");
//! # Ok(()) }
//! ```

use std::time::Duration;

use futures::{
    SinkExt, StreamExt,
    stream::{SplitSink, SplitStream},
};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{
        Message as WsMessage,
        protocol::{
            CloseFrame,
            frame::{
                Frame,
                coding::{Data, OpCode},
            },
        },
    },
};

use super::{PlatformConfig, PlatformError, open_socket};

/// One frame from the crew, as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawFrame {
    /// A binary frame (how the crew sends its events).
    Binary(Vec<u8>),
    /// A text frame.
    Text(String),
    /// A ping (the socket answers it with a pong by itself).
    Ping(Vec<u8>),
    /// A pong.
    Pong(Vec<u8>),
    /// The close frame: its code and reason, if it had any.
    Close(Option<CloseReason>),
}

/// A close frame's code and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReason {
    /// The close code (1000 normal, 1008 policy, 1009 too big, 1011 error, ...).
    pub code: u16,
    /// The reason text (may be empty).
    pub reason: String,
}

/// A WebSocket to a crew with no protocol on top: what is sent is sent as given, what comes
/// is returned as it came. Every wait is bounded by the config's `timeouts.frame`.
#[derive(Debug)]
pub struct RawSocket {
    ws: WebSocketStream<TcpStream>,
    wait: Duration,
}

impl RawSocket {
    /// Opens the WebSocket `config` names (with its token), sending nothing.
    pub async fn connect(config: &PlatformConfig) -> Result<Self, PlatformError> {
        let connect = config.timeouts.connect;
        let ws = tokio::time::timeout(connect, open_socket(config))
            .await
            .map_err(|_| PlatformError::Timeout {
                waiting_for: "the WebSocket connection",
                after: connect,
            })??;
        Ok(Self {
            ws,
            wait: config.timeouts.frame,
        })
    }

    /// Bounds each later wait by `wait` instead.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.set_wait(wait);
        self
    }

    /// Bounds each later wait by `wait`.
    pub fn set_wait(&mut self, wait: Duration) {
        self.wait = wait;
    }

    async fn send(&mut self, message: WsMessage) -> Result<(), PlatformError> {
        write_frame(&mut self.ws, self.wait, message).await
    }

    /// Sends `frame` as a binary frame of its JSON, as the platform sends events.
    pub async fn send_json(&mut self, frame: &Value) -> Result<(), PlatformError> {
        self.send_binary(frame.to_string().into_bytes()).await
    }

    /// Sends `bytes` as one binary frame.
    pub async fn send_binary(&mut self, bytes: Vec<u8>) -> Result<(), PlatformError> {
        self.send(WsMessage::binary(bytes)).await
    }

    /// Sends `text` as one text frame.
    pub async fn send_text(&mut self, text: &str) -> Result<(), PlatformError> {
        self.send(WsMessage::text(text)).await
    }

    /// Sends one binary message as fragments, one frame per piece (a continuation after the
    /// first), as a client may for a large event.
    pub async fn send_fragments(&mut self, pieces: &[&[u8]]) -> Result<(), PlatformError> {
        for (index, piece) in pieces.iter().enumerate() {
            let opcode = if index == 0 {
                OpCode::Data(Data::Binary)
            } else {
                OpCode::Data(Data::Continue)
            };
            let last = index + 1 == pieces.len();
            let frame = Frame::message(piece.to_vec(), opcode, last);
            self.send(WsMessage::Frame(frame)).await?;
        }
        Ok(())
    }

    /// Sends a ping carrying `payload`.
    pub async fn send_ping(&mut self, payload: Vec<u8>) -> Result<(), PlatformError> {
        self.send(WsMessage::Ping(payload.into())).await
    }

    /// The next frame, pings and pongs included; `Ok(None)` when the socket ended without a
    /// close frame.
    pub async fn next_frame(&mut self) -> Result<Option<RawFrame>, PlatformError> {
        read_frame(&mut self.ws, self.wait).await
    }

    /// The socket as two halves, one that sends and one that reads, for a test that reads
    /// on one task while it sends on another (as a platform does).
    pub fn split(self) -> (RawSender, RawReceiver) {
        let (sink, stream) = self.ws.split();
        (
            RawSender {
                sink,
                wait: self.wait,
            },
            RawReceiver {
                stream,
                wait: self.wait,
            },
        )
    }

    /// The next binary frame, skipping pings and pongs, as JSON.
    ///
    /// A text frame, a frame that is not JSON or the end of the call is an
    /// [`PlatformError::UnexpectedFrame`] or [`PlatformError::Closed`].
    pub async fn recv_json(&mut self) -> Result<Value, PlatformError> {
        loop {
            match self.next_frame().await? {
                Some(RawFrame::Binary(bytes)) => {
                    return serde_json::from_slice(&bytes).map_err(|error| {
                        PlatformError::UnexpectedFrame {
                            expected: "a JSON frame",
                            got: format!("{error}: {}", String::from_utf8_lossy(&bytes)),
                        }
                    });
                }
                Some(RawFrame::Ping(_) | RawFrame::Pong(_)) => {}
                Some(RawFrame::Text(text)) => {
                    return Err(PlatformError::UnexpectedFrame {
                        expected: "a binary frame",
                        got: format!("a text frame: {text}"),
                    });
                }
                Some(RawFrame::Close(close)) => {
                    let (code, reason) =
                        close.map_or((None, String::new()), |c| (Some(c.code), c.reason));
                    return Err(PlatformError::Closed { code, reason });
                }
                None => {
                    return Err(PlatformError::Closed {
                        code: None,
                        reason: String::new(),
                    });
                }
            }
        }
    }

    /// JSON frames up to and including the first whose `type` is `wire_type`.
    pub async fn recv_until(&mut self, wire_type: &str) -> Result<Vec<Value>, PlatformError> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv_json().await?;
            let done = frame["type"] == wire_type;
            frames.push(frame);
            if done {
                return Ok(frames);
            }
        }
    }

    /// JSON frames until the crew's close frame; returns them and the close's code and
    /// reason. The socket is read on after the close so the client's answer to it goes out.
    pub async fn recv_until_close(
        &mut self,
    ) -> Result<(Vec<Value>, Option<CloseReason>), PlatformError> {
        let mut frames = Vec::new();
        loop {
            match self.next_frame().await? {
                Some(RawFrame::Binary(bytes)) => {
                    let frame = serde_json::from_slice(&bytes).map_err(|error| {
                        PlatformError::UnexpectedFrame {
                            expected: "a JSON frame",
                            got: format!("{error}: {}", String::from_utf8_lossy(&bytes)),
                        }
                    })?;
                    frames.push(frame);
                }
                Some(RawFrame::Close(close)) => {
                    self.drain().await;
                    return Ok((frames, close));
                }
                Some(RawFrame::Ping(_) | RawFrame::Pong(_)) => {}
                Some(RawFrame::Text(text)) => {
                    return Err(PlatformError::UnexpectedFrame {
                        expected: "a binary frame or the close",
                        got: format!("a text frame: {text}"),
                    });
                }
                None => {
                    return Err(PlatformError::Closed {
                        code: None,
                        reason: "the socket ended without a close frame".to_owned(),
                    });
                }
            }
        }
    }

    /// Reads until the socket ends (at most one wait), so a close handshake completes.
    async fn drain(&mut self) {
        let _ = tokio::time::timeout(self.wait, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }

    /// Sends a close frame (no code) and waits for the crew to close its side.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
        self.drain().await;
    }
}

/// The sending half of a [`RawSocket`] (from [`RawSocket::split`]).
#[derive(Debug)]
pub struct RawSender {
    sink: SplitSink<WebSocketStream<TcpStream>, WsMessage>,
    wait: Duration,
}

impl RawSender {
    /// Sends `bytes` as one binary frame.
    pub async fn send_binary(&mut self, bytes: Vec<u8>) -> Result<(), PlatformError> {
        write_frame(&mut self.sink, self.wait, WsMessage::binary(bytes)).await
    }

    /// Sends `text` as one text frame.
    pub async fn send_text(&mut self, text: &str) -> Result<(), PlatformError> {
        write_frame(&mut self.sink, self.wait, WsMessage::text(text)).await
    }

    /// Sends a close frame with `code` and `reason`; the reading half sees the crew's answer.
    pub async fn close(&mut self, code: u16, reason: &str) -> Result<(), PlatformError> {
        let frame = CloseFrame {
            code: code.into(),
            reason: reason.to_owned().into(),
        };
        write_frame(&mut self.sink, self.wait, WsMessage::Close(Some(frame))).await
    }
}

/// The reading half of a [`RawSocket`] (from [`RawSocket::split`]).
#[derive(Debug)]
pub struct RawReceiver {
    stream: SplitStream<WebSocketStream<TcpStream>>,
    wait: Duration,
}

impl RawReceiver {
    /// Bounds each later wait by `wait` instead (`Duration::MAX`: read until the socket ends).
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The next frame, pings and pongs included; `Ok(None)` when the socket ended without a
    /// close frame.
    pub async fn next_frame(&mut self) -> Result<Option<RawFrame>, PlatformError> {
        read_frame(&mut self.stream, self.wait).await
    }
}

/// Writes one message, bounded by `wait`.
async fn write_frame<S>(
    sink: &mut S,
    wait: Duration,
    message: WsMessage,
) -> Result<(), PlatformError>
where
    S: futures::Sink<WsMessage, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
{
    let sent = tokio::time::timeout(wait, sink.send(message))
        .await
        .map_err(|_| PlatformError::Timeout {
            waiting_for: "a frame to be written",
            after: wait,
        })?;
    sent.map_err(|error| PlatformError::Closed {
        code: None,
        reason: error.to_string(),
    })
}

/// Reads the next frame, bounded by `wait`.
async fn read_frame<S>(stream: &mut S, wait: Duration) -> Result<Option<RawFrame>, PlatformError>
where
    S: futures::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let next = tokio::time::timeout(wait, stream.next())
        .await
        .map_err(|_| PlatformError::Timeout {
            waiting_for: "a frame from the crew",
            after: wait,
        })?;
    Ok(match next {
        None => None,
        Some(Err(error)) => {
            return Err(PlatformError::Closed {
                code: None,
                reason: error.to_string(),
            });
        }
        Some(Ok(message)) => Some(match message {
            WsMessage::Binary(bytes) => RawFrame::Binary(bytes.to_vec()),
            WsMessage::Text(text) => RawFrame::Text(text.as_str().to_owned()),
            WsMessage::Ping(data) => RawFrame::Ping(data.to_vec()),
            WsMessage::Pong(data) => RawFrame::Pong(data.to_vec()),
            WsMessage::Close(frame) => RawFrame::Close(frame.map(close_reason)),
            // Only a raw frame read would give one; reads here are whole messages.
            WsMessage::Frame(_) => return Ok(None),
        }),
    })
}

fn close_reason(frame: CloseFrame) -> CloseReason {
    CloseReason {
        code: frame.code.into(),
        reason: frame.reason.as_str().to_owned(),
    }
}

/// A masked client frame (`opcode` 0x1 text, 0x2 binary, 0x9 ping, ...) carrying `payload`,
/// byte for byte, for tests that write frames to a bare TCP stream (a frame header that lies
/// about its length, a frame over the server's limit).
pub fn masked_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x80 | opcode];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len @ 126..=0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

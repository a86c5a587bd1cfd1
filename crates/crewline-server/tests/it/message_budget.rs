//! The budget of unfinished messages all calls share (issue 30: 200 calls each holding an
//! unfinished 900 KiB message cost 1.2 MiB each, 24 GiB at 20,000 calls): the call whose read
//! overdraws it is closed with 1013, the others go on, and a call's share comes back when its
//! message is whole or the call ends.

use crate::common;

use std::{net::SocketAddr, time::Duration};

use common::*;
use crewline_server::{CrewServer, ErrorKind, HandshakeFailure};
use futures::StreamExt;
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{Message, protocol::Role},
};

const KIB: usize = 1024;
/// What a call may have pending before it is charged (crewline-http's default).
const ALLOWANCE: usize = crewline_http::budget::DEFAULT_ALLOWANCE;
/// One fragment's payload: under 64 KiB, so its header is 8 bytes (2, a 16-bit length, the
/// mask).
const PIECE: usize = 60 * KIB;
const PIECE_ON_THE_WIRE: usize = PIECE + 8;
/// A held message: eight fragments, the last one not final.
const HELD_PIECES: usize = 8;
/// What one call holding such a message is charged.
const CHARGE: usize = HELD_PIECES * PIECE_ON_THE_WIRE - ALLOWANCE;
/// Room in the budget beside two held messages.
const SLACK: usize = 4 * KIB;

/// Sends the WebSocket upgrade request for `/ws` and reads the `101` response's head (byte by
/// byte: nothing after it is consumed).
async fn raw_upgrade(stream: &mut TcpStream, addr: SocketAddr) {
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("upgrade response timeout")
            .expect("read");
        assert_eq!(read, 1, "the server closed during the upgrade");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}

/// A call over a bare socket: frames are written by hand (fragments left unfinished), what the
/// server sends is read through a WebSocket client.
struct HandCall {
    ws: WebSocketStream<TcpStream>,
}

impl HandCall {
    /// Opens a call and waits for `agent.ready`.
    async fn open(addr: SocketAddr) -> Self {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        raw_upgrade(&mut stream, addr).await;
        let init = init_frame("held").to_string();
        stream
            .write_all(&masked_frame(0x2, init.as_bytes()))
            .await
            .expect("system.init");
        let mut call = Self {
            ws: WebSocketStream::from_raw_socket(stream, Role::Client, None).await,
        };
        call.recv_until("agent.ready").await;
        call
    }

    /// Sends the first [`HELD_PIECES`] fragments of a binary message, none of them final.
    async fn hold(&mut self) -> std::io::Result<()> {
        let piece = vec![b' '; PIECE];
        for index in 0..HELD_PIECES {
            let mut frame = masked_frame(if index == 0 { 0x2 } else { 0x0 }, &piece);
            frame[0] &= 0x7f; // not the last fragment
            self.ws.get_mut().write_all(&frame).await?;
        }
        Ok(())
    }

    /// Sends the held message's last fragment: the message is whole (and not an event).
    async fn finish(&mut self) {
        let frame = masked_frame(0x0, b" ");
        self.ws.get_mut().write_all(&frame).await.expect("write");
    }

    /// The server's JSON frames up to and including the first of type `until`.
    async fn recv_until(&mut self, until: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            match self.next().await {
                Message::Binary(bytes) => {
                    let frame: Value = serde_json::from_slice(&bytes).expect("JSON");
                    let done = frame["type"] == until;
                    frames.push(frame);
                    if done {
                        return frames;
                    }
                }
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("waiting for {until}, got {other:?}"),
            }
        }
    }

    /// The server's JSON frames until its close frame, and the close code.
    async fn recv_until_close(&mut self) -> (Vec<Value>, u16) {
        let mut frames = Vec::new();
        loop {
            match self.next().await {
                Message::Binary(bytes) => {
                    frames.push(serde_json::from_slice(&bytes).expect("JSON"))
                }
                Message::Close(close) => {
                    return (frames, close.map_or(0, |close| u16::from(close.code)));
                }
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("waiting for the close, got {other:?}"),
            }
        }
    }

    async fn next(&mut self) -> Message {
        tokio::time::timeout(WAIT, self.ws.next())
            .await
            .expect("a frame in time")
            .expect("the socket is open")
            .expect("a frame")
    }
}

async fn pending_is(server: &TestServer, bytes: usize) {
    let handle = server.handle.clone();
    eventually(&format!("{bytes} pending bytes charged"), || {
        let handle = handle.clone();
        async move { handle.pending_message_bytes() == bytes }
    })
    .await;
}

#[tokio::test]
async fn the_call_that_overdraws_the_shared_budget_is_closed_and_the_others_go_on() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            // Two held messages and the last fragments that finish them: a third held
            // message overdraws it.
            .max_pending_bytes(2 * CHARGE + SLACK)
            .ping_interval(Duration::from_secs(120))
            .idle_timeout(Duration::from_secs(120)),
    )
    .await;
    let mut healthy = server.call("Ada").await;
    let (_, text) = healthy.turn("before").await;
    assert_eq!(text, expected_answer("Ada", "before"));

    let mut first = HandCall::open(server.addr).await;
    first.hold().await.expect("held");
    let mut second = HandCall::open(server.addr).await;
    second.hold().await.expect("held");
    pending_is(&server, 2 * CHARGE).await;

    // The budget is all but spent: the healthy call's small frames never touch it.
    let (_, text) = healthy.turn("while the budget is spent").await;
    assert_eq!(text, expected_answer("Ada", "while the budget is spent"));

    // A third call's message takes the budget over: that call, and only it, is closed.
    let mut third = HandCall::open(server.addr).await;
    // The server stops reading at the refusal; the rest of the writes may fail.
    let _ = third.hold().await;
    let (frames, code) = third.recv_until_close().await;
    assert_eq!(code, 1013, "try again later");
    let error = frames
        .iter()
        .find(|frame| frame["type"] == "agent.error")
        .expect("an agent.error");
    assert_eq!(error["payload"]["reason"], "message_budget", "{error}");
    assert_eq!(server.handle.metrics().errors(ErrorKind::MessageBudget), 1);
    server.wait_for_active(3).await;
    pending_is(&server, 2 * CHARGE).await;
    let (_, text) = healthy.turn("after a call was refused").await;
    assert_eq!(text, expected_answer("Ada", "after a call was refused"));

    // A call that ends gives its share back: a new big message fits.
    drop(first);
    server.wait_for_active(2).await;
    pending_is(&server, CHARGE).await;
    let mut fourth = HandCall::open(server.addr).await;
    fourth.hold().await.expect("held");
    pending_is(&server, 2 * CHARGE).await;

    // A message that is whole gives its share back too; the call goes on.
    fourth.finish().await;
    pending_is(&server, CHARGE).await;
    second.finish().await;
    pending_is(&server, 0).await;
    assert_eq!(server.handle.metrics().errors(ErrorKind::MessageBudget), 1);
    server.wait_for_active(3).await;
    let (_, text) = healthy.turn("at the end").await;
    assert_eq!(text, expected_answer("Ada", "at the end"));
}

#[tokio::test]
async fn a_handshake_that_overdraws_the_budget_is_refused_too() {
    let server = TestServer::ready(CrewServer::new(echo_setup).max_pending_bytes(0)).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    raw_upgrade(&mut stream, server.addr).await;
    // The first message, unfinished and past the allowance.
    let piece = vec![b' '; PIECE];
    for index in 0..2 {
        let mut frame = masked_frame(if index == 0 { 0x2 } else { 0x0 }, &piece);
        frame[0] &= 0x7f;
        stream.write_all(&frame).await.expect("write");
    }
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Client, None).await;
    let close = loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
        {
            Some(Ok(Message::Close(close))) => break close,
            Some(Ok(_)) => {}
            other => panic!("waiting for the close, got {other:?}"),
        }
    };
    assert_eq!(close.map(|close| u16::from(close.code)), Some(1013));
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::MessageBudget),
        1
    );
    server.wait_for_active(0).await;
    assert_eq!(server.handle.pending_message_bytes(), 0);
}

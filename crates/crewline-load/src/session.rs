//! One simulated call: a lean platform client on a single task.
//!
//! [`crewline_testkit::platform::PlatformClient`] decodes every frame into typed events and runs a reader
//! and a writer task per connection; at 10,000 calls that client would cost more CPU than the
//! crew under test. This one owns its socket on one task, reads only the `type` (and the few
//! fields it counts) of each frame, and stamps frames as it reads them.

use std::{borrow::Cow, sync::Arc, time::Duration};

use crewline::protocol::{
    self, Caller, Event, EventBody, LlmRequest, TranscriptRole, TranscriptUpdate,
};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::{net::TcpStream, time::Instant};
use tokio_tungstenite::{WebSocketStream, tungstenite::Message as WsMessage};

use super::{
    Scenario, Shared,
    route::{Route, TurnRoute},
    script::Script,
    stats::{InterruptSample, TurnSample},
    turn_log::{TurnOutcome, TurnRecord},
};
use crewline_testkit::platform::{PlatformConfig, open_socket};

type Socket = WebSocketStream<TcpStream>;

/// The fields of a crew frame the load generator looks at; the rest is skipped unparsed.
#[derive(Debug, Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

/// The payload fields of an `agent.log` frame the router scenario reads: an
/// `agent.transition`'s `from` and `to`, a `tool_call_start`'s `function_name`.
#[derive(Debug, Default, Deserialize)]
struct LogPayload<'a> {
    #[serde(default, borrow)]
    from: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    to: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function_name: Option<Cow<'a, str>>,
}

/// An `agent.log` frame's payload (parsed only in the router scenario).
#[derive(Debug, Deserialize)]
struct LogFrame<'a> {
    #[serde(default, borrow)]
    payload: LogPayload<'a>,
}

/// Why a session stopped before its last turn.
#[derive(Debug)]
enum Abort {
    /// No frame within the deadline.
    Timeout(&'static str),
    /// The socket closed or failed.
    Closed(String),
    /// The crew refused the handshake.
    Rejected(String),
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout(what) => write!(f, "timed out waiting for {what}"),
            Self::Closed(why) => write!(f, "connection lost: {why}"),
            Self::Rejected(why) => write!(f, "handshake rejected: {why}"),
        }
    }
}

/// Milliseconds since the run began.
fn since_start(shared: &Shared, at: Instant) -> f64 {
    ms(at - shared.began)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Runs one session: connect, wait at the start line (not in the open loop), then drive every
/// turn; with [`super::LoadConfig::reconnect`], a dropped connection is reconnected with the
/// same call id and the turn in flight sent again.
pub(crate) async fn run(shared: Arc<Shared>, index: usize) {
    let call_id = format!("{}-{index}", shared.call_prefix);
    let started = Instant::now();
    let mut budget = shared.config.reconnect.map_or(0, |r| r.retries);
    let mut connected = connect(&shared, &call_id).await;
    if connected.is_err() && shared.config.reconnect.is_some() {
        connected = reconnect(&shared, &call_id, &mut budget).await;
    }
    {
        let mut totals = shared.lock();
        match &connected {
            Ok(_) => {
                totals.connected += 1;
                totals.connect.record(started.elapsed());
            }
            Err(error) => {
                totals.connect_errors += 1;
                totals.turns_not_run += shared.config.turns as u64;
                totals.note_error(format!("connect: {error}"));
            }
        }
    }
    if let Err(error) = &connected {
        shared.log(TurnRecord {
            at_ms: since_start(&shared, started),
            session: index,
            turn: None,
            outcome: TurnOutcome::ConnectFailed,
            first_chunk_ms: None,
            end_ms: None,
            error: Some(error.to_string()),
        });
    }
    shared.arrive();
    let Ok(mut socket) = connected else {
        return;
    };
    if !shared.config.open_loop {
        shared.wait_start().await;
    }
    // In the open loop the arrivals are already spread by the ramp: the first turn starts as
    // soon as the call is connected.
    if !shared.config.think.is_zero() && !shared.config.open_loop {
        // Spread the first turns over one think time, as calls do, instead of a burst of
        // every session at once (the golden ratio scatters consecutive sessions evenly).
        let offset = (index as f64 * 0.618_033_988_75).fract();
        tokio::time::sleep(shared.config.think.mul_f64(offset)).await;
    }
    let reconnecting = shared.config.reconnect.is_some();
    let mut script = Script::new(shared.config.scenario, index, shared.config.turns);
    // The router scenario follows the call's sub-agent and checks its resumed turns.
    let mut route = (shared.config.scenario == Scenario::Router).then(Route::default);
    let mut history: Vec<Value> = Vec::with_capacity(2 * shared.config.turns);
    let mut turn = 0;
    while let Some(text) = script.next_words() {
        // Each turn may reconnect up to the configured number of times.
        budget = shared.config.reconnect.map_or(0, |r| r.retries);
        if turn > 0 && !shared.config.think.is_zero() {
            if reconnecting {
                // A platform reads its socket between turns too: a drop here is found (and
                // mended) before the next turn, so that turn was never in flight at a drop.
                if let Err(abort) = pause(&shared, &mut socket, shared.config.think).await {
                    shared.lock().drops += 1;
                    if let Some(route) = &mut route {
                        route.dropped(&TurnRoute::default());
                    }
                    match reconnect(&shared, &call_id, &mut budget).await {
                        Ok(fresh) => socket = fresh,
                        Err(_) => {
                            let at = Instant::now();
                            let ended = Ended::new(&call_id, index, &script, route.as_ref());
                            fail_turn(&shared, &ended, turn, at, abort);
                            return;
                        }
                    }
                }
            } else {
                tokio::time::sleep(shared.config.think).await;
            }
        }
        let began = Instant::now();
        history.push(json!({"role": "user", "content": text}));
        let mut hit = false;
        // A turn sent again after a reconnect is timed from its first sending: the caller
        // waited all along.
        let mut first_sent = None;
        // What the answering attempt showed of the router (router scenario).
        let mut seen;
        let outcome = loop {
            seen = TurnRoute::default();
            let attempt = run_turn(
                &shared,
                &mut socket,
                &history,
                &text,
                &mut first_sent,
                &mut seen,
            );
            match attempt.await {
                Ok(done) => break Ok(done),
                Err(Abort::Rejected(why)) => break Err(Abort::Rejected(why)),
                Err(abort) if reconnecting => {
                    {
                        let mut totals = shared.lock();
                        totals.drops += 1;
                        if !hit {
                            totals.turns_in_flight_at_drop += 1;
                        }
                    }
                    hit = true;
                    if let Some(route) = &mut route {
                        route.dropped(&seen);
                    }
                    match reconnect(&shared, &call_id, &mut budget).await {
                        Ok(fresh) => socket = fresh,
                        // Out of retries: the turn is lost with the drop that started it.
                        Err(_) => break Err(abort),
                    }
                }
                Err(abort) => break Err(abort),
            }
        };
        match outcome {
            Ok((sample, answer)) => {
                shared.lock().add_turn(&sample);
                shared.log(TurnRecord {
                    at_ms: since_start(&shared, began),
                    session: index,
                    turn: Some(turn),
                    outcome: sample.outcome(),
                    first_chunk_ms: sample.first_chunk.map(ms),
                    end_ms: Some(ms(sample.end)),
                    error: None,
                });
                // The platform reports what the agent said, and keeps it in its conversation.
                // A failure here is found by the next turn.
                let _ = send(
                    &mut socket,
                    Event::now(EventBody::TranscriptUpdate(TranscriptUpdate {
                        role: TranscriptRole::Assistant,
                        content: answer.clone(),
                    })),
                )
                .await;
                script.heard(&text, &answer);
                if let Some(route) = &mut route {
                    route.answered(turn, &seen, &answer);
                }
                history.push(json!({"role": "assistant", "content": answer}));
            }
            Err(abort) => {
                let ended = Ended::new(&call_id, index, &script, route.as_ref());
                fail_turn(&shared, &ended, turn, began, abort);
                return;
            }
        }
        turn += 1;
    }
    Ended::new(&call_id, index, &script, route.as_ref()).count(&mut shared.lock());
    // A polite close; the crew's answer is not waited for beyond a short bound.
    let _ = tokio::time::timeout(Duration::from_secs(2), socket.close(None)).await;
}

/// A call at its end: what is counted once per call.
struct Ended<'a> {
    call_id: &'a str,
    index: usize,
    script: &'a Script,
    route: Option<&'a Route>,
}

impl<'a> Ended<'a> {
    fn new(call_id: &'a str, index: usize, script: &'a Script, route: Option<&'a Route>) -> Self {
        Self {
            call_id,
            index,
            script,
            route,
        }
    }

    /// Adds the call's transfers and resumed turns to the totals.
    fn count(&self, totals: &mut super::stats::Totals) {
        totals.add_transfers(&self.script.transfers);
        if let Some(route) = self.route {
            totals.add_route(self.call_id, route);
        }
    }
}

/// Counts a turn that never completed, and the turns its session will not run.
fn fail_turn(shared: &Shared, ended: &Ended<'_>, turn: usize, began: Instant, abort: Abort) {
    let (index, script) = (ended.index, ended.script);
    let outcome = {
        let mut totals = shared.lock();
        let outcome = match abort {
            Abort::Timeout(_) => {
                totals.turns_timed_out += 1;
                TurnOutcome::TimedOut
            }
            Abort::Closed(_) | Abort::Rejected(_) => {
                totals.turns_lost += 1;
                TurnOutcome::Lost
            }
        };
        totals.turns_not_run += script.left() as u64;
        totals.note_error(abort.to_string());
        ended.count(&mut totals);
        outcome
    };
    shared.log(TurnRecord {
        at_ms: since_start(shared, began),
        session: index,
        turn: Some(turn),
        outcome,
        first_chunk_ms: None,
        end_ms: None,
        error: Some(abort.to_string()),
    });
}

/// Connects again after a drop, with the same call id, within `budget` attempts (backing off
/// between them); the last error when none succeeds.
async fn reconnect(shared: &Shared, call_id: &str, budget: &mut u32) -> Result<Socket, Abort> {
    let Some(policy) = shared.config.reconnect else {
        return Err(Abort::Closed("reconnecting is off".to_owned()));
    };
    let mut last = Abort::Closed("no reconnect attempt left".to_owned());
    let mut attempt = 0_u32;
    while *budget > 0 {
        *budget -= 1;
        let backoff = policy
            .backoff
            .saturating_mul(2_u32.saturating_pow(attempt))
            .min(policy.max_backoff);
        tokio::time::sleep(backoff).await;
        attempt += 1;
        match connect(shared, call_id).await {
            Ok(socket) => {
                shared.lock().reconnects += 1;
                return Ok(socket);
            }
            Err(error) => {
                shared.lock().reconnect_failures += 1;
                last = error;
            }
        }
    }
    Err(last)
}

/// Waits `think` between turns while reading the socket: a frame that arrives is skipped (a
/// chunk counts as stray), a close or a failure is returned.
async fn pause(shared: &Shared, socket: &mut Socket, think: Duration) -> Result<(), Abort> {
    let deadline = Instant::now() + think;
    loop {
        match next_frame(socket, deadline, "nothing").await {
            Err(Abort::Timeout(_)) => return Ok(()),
            Err(abort) => return Err(abort),
            Ok(bytes) => {
                if let Ok(head) = serde_json::from_slice::<Head<'_>>(&bytes)
                    && head.kind == "agent.llm.response.chunk"
                {
                    shared.lock().stray_chunks += 1;
                }
            }
        }
    }
}

async fn connect(shared: &Shared, call_id: &str) -> Result<Socket, Abort> {
    let config = &shared.config;
    let mut platform = PlatformConfig::new(config.url.clone());
    platform.token.clone_from(&config.token);
    // The platform's call id: the same on every connection of this call.
    platform.caller = Some(Caller {
        call_id: Some(call_id.to_owned()),
        ..Caller::default()
    });
    let mut socket = tokio::time::timeout(config.connect_timeout, open_socket(&platform))
        .await
        .map_err(|_| Abort::Timeout("the WebSocket connection"))?
        .map_err(|e| Abort::Closed(e.to_string()))?;
    send(&mut socket, platform.init_event()).await?;
    let deadline = Instant::now() + config.connect_timeout;
    loop {
        let bytes = next_frame(&mut socket, deadline, "agent.ready").await?;
        let Ok(head) = serde_json::from_slice::<Head<'_>>(&bytes) else {
            continue;
        };
        match head.kind.as_ref() {
            "agent.ready" => break,
            "agent.error" => {
                return Err(Abort::Rejected(
                    head.message.map(Cow::into_owned).unwrap_or_default(),
                ));
            }
            _ => {}
        }
    }
    send(&mut socket, Event::now(EventBody::UserJoined)).await?;
    Ok(socket)
}

async fn send(socket: &mut Socket, event: Event) -> Result<(), Abort> {
    socket
        .send(WsMessage::Binary(protocol::encode(&event).into()))
        .await
        .map_err(|e| Abort::Closed(e.to_string()))
}

/// The next data frame's bytes; pings and pongs are skipped (tungstenite answers pings).
async fn next_frame(
    socket: &mut Socket,
    deadline: Instant,
    waiting_for: &'static str,
) -> Result<tokio_tungstenite::tungstenite::Bytes, Abort> {
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .map_err(|_| Abort::Timeout(waiting_for))?;
        match message {
            Some(Ok(WsMessage::Binary(bytes))) => return Ok(bytes),
            Some(Ok(WsMessage::Text(text))) => return Ok(text.into()),
            Some(Ok(WsMessage::Close(frame))) => {
                return Err(Abort::Closed(match frame {
                    Some(frame) => format!("close {} {}", u16::from(frame.code), frame.reason),
                    None => "close frame".to_owned(),
                }));
            }
            Some(Ok(_)) => {}
            Some(Err(error)) => return Err(Abort::Closed(error.to_string())),
            None => return Err(Abort::Closed("socket ended".to_owned())),
        }
    }
}

async fn run_turn(
    shared: &Shared,
    socket: &mut Socket,
    history: &[Value],
    text: &str,
    first_sent: &mut Option<Instant>,
    seen: &mut TurnRoute,
) -> Result<(TurnSample, String), Abort> {
    let config = &shared.config;
    send(
        socket,
        Event::now(EventBody::TranscriptUpdate(TranscriptUpdate {
            role: TranscriptRole::User,
            content: text.to_owned(),
        })),
    )
    .await?;
    let request = Event::now(EventBody::LlmRequest(LlmRequest {
        messages: Some(protocol::Messages::from_values(history)),
        extra_params: Map::new(),
    }));
    send(socket, request).await?;
    let deadline = Instant::now() + config.turn_timeout;
    let sent = *first_sent.get_or_insert_with(Instant::now);

    let mut sample = TurnSample::default();
    let mut started = false;
    let mut answer = String::new();
    let mut interrupted_at: Option<Instant> = None;
    let mut last_chunk_after_interrupt: Option<Instant> = None;
    loop {
        let bytes = next_frame(socket, deadline, "the end of a turn").await?;
        let now = Instant::now();
        let Ok(head) = serde_json::from_slice::<Head<'_>>(&bytes) else {
            continue;
        };
        match head.kind.as_ref() {
            "agent.llm.response.start" => started = true,
            "agent.llm.response.chunk" if !started => sample.stray_chunks += 1,
            "agent.llm.response.chunk" => {
                sample.chunks += 1;
                if sample.first_chunk.is_none() {
                    sample.first_chunk = Some(now - sent);
                }
                if let Some(text) = &head.text {
                    answer.push_str(text);
                }
                match interrupted_at {
                    Some(_) => {
                        sample.interrupt.get_or_insert_default().chunks_after += 1;
                        last_chunk_after_interrupt = Some(now);
                    }
                    None if config.scenario == Scenario::Interrupt => {
                        // Measured from the moment the platform decides to interrupt.
                        interrupted_at = Some(Instant::now());
                        send(socket, Event::now(EventBody::Interrupt)).await?;
                        sample.interrupt.get_or_insert_default();
                    }
                    None => {}
                }
            }
            "agent.llm.response.end" if started => {
                sample.end = now - sent;
                if let (Some(at), Some(interrupt)) = (interrupted_at, sample.interrupt.as_mut()) {
                    *interrupt = InterruptSample {
                        to_last_chunk: last_chunk_after_interrupt
                            .map_or(Duration::ZERO, |last| last - at),
                        to_end: now - at,
                        chunks_after: interrupt.chunks_after,
                    };
                }
                break;
            }
            "agent.log" => {
                match head.name.as_deref() {
                    Some("tool_call_end") => sample.tool_ends += 1,
                    Some("tool_call_error") => sample.tool_errors += 1,
                    _ => {}
                }
                if config.scenario == Scenario::Router {
                    follow_router(head.name.as_deref(), &bytes, seen);
                }
            }
            "agent.error" => {
                sample.agent_errors += 1;
                let message = head.message.as_deref().unwrap_or_default();
                shared.lock().note_error(format!("agent.error: {message}"));
            }
            _ => {}
        }
    }
    Ok((sample, answer))
}

/// Notes what an `agent.log` frame named `name` shows of the router: a move, or a tool called.
fn follow_router(name: Option<&str>, bytes: &[u8], seen: &mut TurnRoute) {
    let transition = name == Some(crewline::router::TRANSITION_LOG);
    if !transition && name != Some("tool_call_start") {
        return;
    }
    let Ok(frame) = serde_json::from_slice::<LogFrame<'_>>(bytes) else {
        return;
    };
    let payload = frame.payload;
    if !transition {
        if let Some(tool) = payload.function_name {
            seen.tools.push(tool.into_owned());
        }
    } else if let Some(to) = payload.to {
        seen.transitions
            .push((payload.from.map(Cow::into_owned), to.into_owned()));
    }
}

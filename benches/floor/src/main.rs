//! An instrument, not a product: the least work a server of crewline's platform protocol must
//! do on the same stack, to hold crewline against (issue 19, BENCHMARKS.md).
//!
//! It answers `system.init` with `agent.ready`, streams each `system.llm.request` from the
//! model as `agent.llm.response.start` / `.chunk` / `.end`, drops the model's stream on
//! `system.control.interrupt`, and nothing else: no crew, no context, no tools, no echo, no
//! auth, no limits, no metrics. It is written for speed on purpose (the whole point of a
//! floor): tokio, tokio-tungstenite with 8 KiB buffers, hyper 1's pooled client, a line
//! splitter over the SSE bytes, borrowed serde_json parsing of the request frame and of each
//! delta, the chunk frames of one model read written together, the socket read only when it
//! woke the call, the timestamp's date and time formatted once per second, mimalloc.
//!
//! ```sh
//! crewline-floor --port 8090 --llm-url http://127.0.0.1:8081/v1/chat/completions
//! crewline load --url ws://127.0.0.1:8090/ws --sessions 1000 --turns 3
//! ```
//!
//! An `https` model URL goes through the TLS crewline's default client uses: rustls with
//! aws-lc-rs and the platform's verifier (its roots, `SSL_CERT_FILE`, and `--ca-file PEM`),
//! offering HTTP/2 then HTTP/1.1 by ALPN (`--http1`: HTTP/1.1 alone, as
//! `OpenAiClientBuilder::http2(false)`).

use std::{
    borrow::Cow,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
    time::SystemTime,
};

use bytes::Bytes;
use futures::{SinkExt, StreamExt, task::AtomicWaker};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Uri, body::Incoming, header};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{Client, ResponseFuture, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{self, Message, protocol::WebSocketConfig},
};

#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The WebSocket buffers: 8 KiB each way.
const BUFFER_BYTES: usize = 8 * 1024;

type Http = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;
type Socket = WebSocketStream<TcpStream>;

/// Where the model is and what it is asked for.
struct Model {
    http: Http,
    uri: Uri,
    name: String,
}

/// The fields of a platform frame the floor reads; the rest is skipped unparsed.
#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    messages: Option<&'a RawValue>,
}

/// A streamed chat-completion chunk, borrowed from the line it came in.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut port: u16 = 8090;
    let mut llm_url = String::from("http://127.0.0.1:8081/v1/chat/completions");
    let mut model = String::from("mock");
    let mut tls = Tls::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--port" => port = value()?.parse()?,
            "--llm-url" => llm_url = value()?,
            "--model" => model = value()?,
            "--ca-file" => tls.ca_file = Some(value()?),
            "--http1" => tls.http2 = false,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let http = runtime.block_on(async { http_client(&tls) })?;
    runtime.block_on(serve(port, llm_url.parse()?, model, http))
}

/// The model connection's TLS settings.
struct Tls {
    /// A PEM file of CA certificates trusted beside the platform's roots.
    ca_file: Option<String>,
    /// Whether ALPN offers `h2`.
    http2: bool,
}

impl Default for Tls {
    fn default() -> Self {
        Self {
            ca_file: None,
            http2: true,
        }
    }
}

/// The pooled client to the model, over HTTP or HTTPS as crewline-llm connects: no Nagle
/// delay, rustls with the platform's verifier and the extra roots, h2 then http/1.1.
fn http_client(tls: &Tls) -> Result<Http, Box<dyn std::error::Error>> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let roots = match &tls.ca_file {
        Some(path) => CertificateDer::pem_file_iter(path)?.collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let verifier =
        rustls_platform_verifier::Verifier::new_with_extra_roots(roots, provider.clone())?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let https = HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http();
    let https = if tls.http2 {
        https.enable_all_versions().wrap_connector(http)
    } else {
        https.enable_http1().wrap_connector(http)
    };
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .build(https))
}

async fn serve(
    port: u16,
    uri: Uri,
    name: String,
    http: Http,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    eprintln!("crewline-floor listening on {}", listener.local_addr()?);
    let model = Arc::new(Model { http, uri, name });
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                tokio::spawn(call(stream, Arc::clone(&model)));
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// One call: the handshake, then each request answered until the socket closes.
async fn call(stream: TcpStream, model: Arc<Model>) {
    let config = WebSocketConfig::default()
        .read_buffer_size(BUFFER_BYTES)
        .write_buffer_size(BUFFER_BYTES);
    let Ok(mut socket) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await
    else {
        return;
    };
    let mut answer: Option<Answer> = None;
    let gate = ReadGate::new();
    loop {
        tokio::select! {
            message = gate.next(&mut socket) => {
                let bytes = match message {
                    Some(Ok(Message::Text(text))) => Bytes::from(text),
                    Some(Ok(Message::Binary(bytes))) => bytes,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                    Some(Ok(_)) => continue,
                };
                let Ok(frame) = json::<Frame<'_>>(&bytes) else { continue };
                let sent = match frame.kind.as_ref() {
                    "system.init" => send(&mut socket, "agent.ready", None).await,
                    "system.llm.request" => {
                        if answer.take().is_some() {
                            let _ = send(&mut socket, END, None).await;
                        }
                        answer = Some(Answer::open(&model, frame.messages));
                        send(&mut socket, START, None).await
                    }
                    "system.control.interrupt" => match answer.take() {
                        // Dropping the answer drops the model's stream.
                        Some(_) => send(&mut socket, END, None).await,
                        None => Ok(()),
                    },
                    _ => Ok(()),
                };
                if sent.is_err() {
                    return;
                }
            }
            read = next_read(&mut answer) => {
                let done = match read {
                    Some(bytes) => match answer.as_mut() {
                        Some(open) => match open.chunks(&bytes, &mut socket).await {
                            Ok(done) => done,
                            Err(()) => return,
                        },
                        None => true,
                    },
                    None => true,
                };
                if done {
                    answer = None;
                    if send(&mut socket, END, None).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Polls the socket for a frame only when the socket has woken the task since it last had
/// nothing: tungstenite zeroes its free read buffer (8 KiB) on every poll, and the call's loop
/// would otherwise poll it after every model read (a third of the floor's instructions).
struct ReadGate {
    flag: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl ReadGate {
    fn new() -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&flag));
        Self { flag, waker }
    }

    async fn next(&self, socket: &mut Socket) -> Option<Result<Message, tungstenite::Error>> {
        std::future::poll_fn(|cx| {
            self.flag.task.register(cx.waker());
            if !self.flag.woken.swap(false, Ordering::AcqRel) {
                return Poll::Pending;
            }
            let mut inner = Context::from_waker(&self.waker);
            let polled = socket.poll_next_unpin(&mut inner);
            if polled.is_ready() {
                // More frames may be buffered already, with no wake to come for them.
                self.flag.woken.store(true, Ordering::Release);
            }
            polled
        })
        .await
    }
}

const START: &str = "agent.llm.response.start";
const END: &str = "agent.llm.response.end";
const CHUNK: &str = "agent.llm.response.chunk";

/// The next bytes of the answer being streamed; pending while none is.
async fn next_read(answer: &mut Option<Answer>) -> Option<Bytes> {
    match answer {
        Some(answer) => answer.read().await,
        None => std::future::pending().await,
    }
}

/// One model request: its headers, then its body, split into SSE lines.
enum Body {
    Opening(ResponseFuture),
    Reading(Incoming),
    /// The request could not be built: the answer ends at once.
    Failed,
}

struct Answer {
    body: Body,
    /// An SSE line not yet ended by `\n`.
    line: Vec<u8>,
}

impl Answer {
    fn open(model: &Model, messages: Option<&RawValue>) -> Self {
        let mut body = Vec::with_capacity(256);
        body.extend_from_slice(b"{\"model\":");
        let _ = serde_json::to_writer(&mut body, &model.name);
        body.extend_from_slice(b",\"stream\":true,\"messages\":");
        body.extend_from_slice(messages.map_or("[]", RawValue::get).as_bytes());
        body.push(b'}');
        let request = Request::post(model.uri.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, "Bearer sk-floor")
            .body(Full::new(Bytes::from(body)));
        let body = match request {
            Ok(request) => Body::Opening(model.http.request(request)),
            Err(_) => Body::Failed,
        };
        Self {
            body,
            line: Vec::new(),
        }
    }

    /// The body's next data, or `None` once it has ended or failed.
    async fn read(&mut self) -> Option<Bytes> {
        loop {
            match &mut self.body {
                Body::Opening(response) => match response.await {
                    Ok(response) if response.status().is_success() => {
                        self.body = Body::Reading(response.into_body());
                    }
                    _ => return None,
                },
                Body::Reading(body) => match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Some(data);
                        }
                    }
                    Some(Err(_)) | None => return None,
                },
                Body::Failed => return None,
            }
        }
    }

    /// Sends the chunk of every complete `data:` line in `bytes`, in one write; `Ok(true)` at
    /// `[DONE]`.
    async fn chunks(&mut self, mut bytes: &[u8], socket: &mut Socket) -> Result<bool, ()> {
        let mut done = false;
        let mut fed = false;
        while let Some(newline) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = bytes.split_at(newline);
            bytes = &rest[1..];
            let whole;
            let line = if self.line.is_empty() {
                head
            } else {
                self.line.extend_from_slice(head);
                whole = std::mem::take(&mut self.line);
                &whole[..]
            };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let data = data.strip_prefix(b" ").unwrap_or(data);
            if data == b"[DONE]" {
                done = true;
                break;
            }
            let Ok(chunk) = json::<Chunk<'_>>(data) else {
                continue;
            };
            let text = chunk
                .choices
                .into_iter()
                .next()
                .and_then(|choice| choice.delta)
                .and_then(|delta| delta.content);
            if let Some(text) = text.filter(|t| !t.is_empty()) {
                socket
                    .feed(frame(CHUNK, Some(&text)))
                    .await
                    .map_err(|_| ())?;
                fed = true;
            }
        }
        if !done {
            self.line.extend_from_slice(bytes);
        }
        if fed {
            socket.flush().await.map_err(|_| ())?;
        }
        Ok(done)
    }
}

/// `data` read as JSON, checked as UTF-8 once: read from bytes, serde would check each string.
fn json<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, ()> {
    let text = std::str::from_utf8(data).map_err(|_| ())?;
    serde_json::from_str(text).map_err(|_| ())
}

/// Sends one event of `kind` (with `text` for a chunk).
async fn send(socket: &mut Socket, kind: &str, text: Option<&str>) -> Result<(), ()> {
    socket.send(frame(kind, text)).await.map_err(|_| ())
}

/// The frame `{"type", "timestamp", "text"?}` (with `"request_id": null` for a start).
fn frame(kind: &str, text: Option<&str>) -> Message {
    // One allocation, moved into the message: the frame's bytes are never copied.
    let mut out = Vec::with_capacity(80 + text.map_or(0, |t| t.len() + t.len() / 8));
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"timestamp\":\"");
    timestamp(&mut out);
    out.push(b'"');
    if kind == START {
        out.extend_from_slice(b",\"request_id\":null");
    }
    if let Some(text) = text {
        out.extend_from_slice(b",\"text\":");
        let _ = serde_json::to_writer(&mut out, text);
    }
    out.push(b'}');
    // ASCII and JSON-escaped UTF-8 only: valid, so never the empty fallback.
    Message::text(String::from_utf8(out).unwrap_or_default())
}

/// Now as the protocol writes it (ISO 8601, microseconds), in UTC: the least a server must do.
/// The date and time to the second are written once per second (a thread's last one kept).
fn timestamp(out: &mut Vec<u8>) {
    thread_local! {
        static LAST: std::cell::Cell<(u64, [u8; 19])> = const { std::cell::Cell::new((u64::MAX, [0; 19])) };
    }
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (cached, mut text) = LAST.get();
    if cached != secs {
        text = second_text(secs);
        LAST.set((secs, text));
    }
    out.extend_from_slice(&text);
    let mut micros = now.subsec_micros();
    let mut digits = [b'.', 0, 0, 0, 0, 0, 0];
    for digit in digits[1..].iter_mut().rev() {
        *digit = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    out.extend_from_slice(&digits);
}

/// `YYYY-MM-DDTHH:MM:SS` of Unix second `secs`, in UTC.
fn second_text(secs: u64) -> [u8; 19] {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut text = [0u8; 19];
    let formatted = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
    );
    let len = formatted.len().min(19);
    text[..len].copy_from_slice(&formatted.as_bytes()[..len]);
    text
}

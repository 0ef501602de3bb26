//! HTTP/2 with the `h2` crate: one connection shared by several lanes of the engine, each lane
//! one stream in flight at a time. The connection is opened by the first lane that needs it
//! (the others wait for it), driven by its own task, and opened again by the next request once
//! the server has closed it.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::SendRequest;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Uri};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::http::{classify_io, open_stream};
use crate::request::{RequestParts, RequestPlan};
use crate::stats::ErrorKind;
use crate::template::RenderCtx;
use crate::tls::{Handshake, Stream, TlsClient};
use crate::LoadError;

/// Flow-control windows we grant the server: large enough that a response body is not held
/// back by window updates on a loopback link.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

enum State {
    Idle,
    Connecting,
    Ready { sender: SendRequest<Bytes>, generation: u64 },
}

/// One HTTP/2 connection and what it has not yet reported to the run's counters.
pub struct H2Conn {
    state: RefCell<State>,
    generation: Cell<u64>,
    ready: Notify,
    /// Bytes of HTTP/2 frames read and written (after TLS decryption), not yet counted.
    pub bytes_in: Rc<Cell<u64>>,
    pub bytes_out: Rc<Cell<u64>>,
    /// Connections opened and not yet counted.
    pub opened: Cell<u64>,
    /// Handshakes completed and not yet counted.
    pub handshakes: RefCell<Vec<Handshake>>,
}

/// Resets the connection to idle if the lane opening it gives up (its request timed out), so
/// that the lanes waiting for it are not left waiting forever.
struct Opening<'a> {
    conn: &'a H2Conn,
    done: bool,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if !self.done {
            *self.conn.state.borrow_mut() = State::Idle;
            self.conn.ready.notify_waiters();
        }
    }
}

fn classify_h2(e: &h2::Error) -> ErrorKind {
    if let Some(io) = e.get_io() {
        return classify_io(io);
    }
    if e.is_go_away() || e.is_reset() {
        match e.reason() {
            Some(h2::Reason::PROTOCOL_ERROR)
            | Some(h2::Reason::COMPRESSION_ERROR)
            | Some(h2::Reason::FRAME_SIZE_ERROR) => ErrorKind::Protocol,
            _ => ErrorKind::Closed,
        }
    } else {
        ErrorKind::Protocol
    }
}

impl H2Conn {
    pub fn new() -> Rc<H2Conn> {
        Rc::new(H2Conn {
            state: RefCell::new(State::Idle),
            generation: Cell::new(0),
            ready: Notify::new(),
            bytes_in: Rc::new(Cell::new(0)),
            bytes_out: Rc::new(Cell::new(0)),
            opened: Cell::new(0),
            handshakes: RefCell::new(Vec::new()),
        })
    }

    pub fn is_open(&self) -> bool {
        matches!(*self.state.borrow(), State::Ready { .. })
    }

    /// Opens the connection ahead of the first request.
    pub async fn open(self: &Rc<Self>, addr: SocketAddr, tls: Option<&TlsClient>) -> Result<(), ErrorKind> {
        self.sender(addr, tls).await.map(|_| ())
    }

    /// A handle to send on: the open connection, or a new one.
    async fn sender(
        self: &Rc<Self>,
        addr: SocketAddr,
        tls: Option<&TlsClient>,
    ) -> Result<(SendRequest<Bytes>, u64), ErrorKind> {
        loop {
            match &*self.state.borrow() {
                State::Ready { sender, generation } => return Ok((sender.clone(), *generation)),
                State::Connecting => {}
                State::Idle => break,
            }
            // Another lane is opening the connection. (One thread: nothing changes the state
            // between the check above and this registration.)
            self.ready.notified().await;
        }
        *self.state.borrow_mut() = State::Connecting;
        let mut opening = Opening { conn: self, done: false };
        let (stream, handshake) = open_stream(addr, tls).await?;
        let io = Counted { inner: stream, bytes_in: self.bytes_in.clone(), bytes_out: self.bytes_out.clone() };
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| classify_h2(&e))?;
        let generation = self.generation.get() + 1;
        self.generation.set(generation);
        self.opened.set(self.opened.get() + 1);
        if let Some(h) = handshake {
            self.handshakes.borrow_mut().push(h);
        }
        *self.state.borrow_mut() = State::Ready { sender: sender.clone(), generation };
        opening.done = true;
        self.ready.notify_waiters();
        // The connection is driven by its own task; when the server closes it, the next request
        // opens a new one.
        let me = self.clone();
        tokio::task::spawn_local(async move {
            let _ = connection.await;
            me.closed(generation);
        });
        Ok((sender, generation))
    }

    /// Forgets the connection of `generation` (closed, or broken), so that the next request
    /// opens a new one.
    fn closed(&self, generation: u64) {
        let mut state = self.state.borrow_mut();
        if matches!(&*state, State::Ready { generation: g, .. } if *g == generation) {
            *state = State::Idle;
        }
    }

    /// Sends one request on a stream and reads its response to the end; returns the status.
    /// A connection the server had closed while idle is replaced and the request sent again once.
    pub async fn round_trip(
        self: &Rc<Self>,
        addr: SocketAddr,
        tls: Option<&TlsClient>,
        request: Request<()>,
        body: Option<Bytes>,
    ) -> Result<u16, ErrorKind> {
        let mut retried = false;
        let (mut sender, generation) = loop {
            let (sender, generation) = self.sender(addr, tls).await?;
            match sender.ready().await {
                Ok(s) => break (s, generation),
                Err(e) => {
                    self.closed(generation);
                    if retried {
                        return Err(classify_h2(&e));
                    }
                    retried = true;
                }
            }
        };
        let (response, mut send) = sender.send_request(request, body.is_none()).map_err(|e| {
            self.closed(generation);
            classify_h2(&e)
        })?;
        if let Some(b) = body {
            send.send_data(b, true).map_err(|e| classify_h2(&e))?;
        }
        let response = response.await.map_err(|e| classify_h2(&e))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        while !body.is_end_stream() {
            let Some(chunk) = body.data().await else { break };
            let chunk = chunk.map_err(|e| classify_h2(&e))?;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        Ok(status)
    }
}

/// Counts the bytes a connection reads and writes.
struct Counted {
    inner: Stream,
    bytes_in: Rc<Cell<u64>>,
    bytes_out: Rc<Cell<u64>>,
}

impl AsyncRead for Counted {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.inner).poll_read(cx, buf);
        me.bytes_in.set(me.bytes_in.get() + (buf.filled().len() - before) as u64);
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            me.bytes_out.set(me.bytes_out.get() + *n as u64);
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The requests of a plan, built for HTTP/2: the method, `:scheme` and `:authority` once, and
/// per request the path, header values and body its templates draw.
pub struct H2Requests {
    method: Method,
    scheme_authority: String,
    names: Vec<HeaderName>,
    /// The whole request when nothing in it is drawn per request.
    fixed: Option<(Uri, HeaderMap, Option<Bytes>)>,
}

impl H2Requests {
    pub fn new(plan: &RequestPlan) -> Result<H2Requests, LoadError> {
        let method = Method::from_bytes(plan.method.as_bytes())
            .map_err(|_| LoadError::Input(format!("`{}` is not an HTTP method", plan.method)))?;
        let mut names = Vec::new();
        let mut authority = plan.target.authority.clone();
        for (i, name) in plan.header_names().enumerate() {
            let lower = name.to_ascii_lowercase();
            // HTTP/2 carries the host in :authority and has no connection-level headers.
            match &lower[..] {
                b"host" => {
                    let mut ctx = plan.new_ctx();
                    let mut parts = RequestParts::default();
                    plan.render_parts(&mut ctx, 0, &mut parts);
                    authority = String::from_utf8_lossy(&parts.header_values[i]).into_owned();
                }
                b"connection" | b"keep-alive" | b"proxy-connection" | b"upgrade" | b"te" => {
                    return Err(LoadError::Input(format!(
                        "the {} header has no place in HTTP/2; leave it out or load over HTTP/1.1",
                        String::from_utf8_lossy(name)
                    )))
                }
                _ => {}
            }
            names.push(
                HeaderName::from_bytes(&lower).map_err(|_| {
                    LoadError::Input(format!("`{}` is not a header name", String::from_utf8_lossy(name)))
                })?,
            );
        }
        let scheme = if plan.target.tls { "https" } else { "http" };
        let mut requests =
            H2Requests { method, scheme_authority: format!("{scheme}://{authority}"), names, fixed: None };
        if plan.fixed.is_some() {
            let mut ctx = plan.new_ctx();
            let mut parts = RequestParts::default();
            plan.render_parts(&mut ctx, 0, &mut parts);
            let (uri, headers, body) = requests
                .build(&parts)
                .map_err(|why| LoadError::Input(format!("the request cannot be sent over HTTP/2: {why}")))?;
            requests.fixed = Some((uri, headers, body));
        }
        Ok(requests)
    }

    fn build(&self, parts: &RequestParts) -> Result<(Uri, HeaderMap, Option<Bytes>), String> {
        let mut uri = String::with_capacity(self.scheme_authority.len() + parts.path.len());
        uri.push_str(&self.scheme_authority);
        uri.push_str(std::str::from_utf8(&parts.path).map_err(|_| "the path is not UTF-8".to_string())?);
        let uri = Uri::try_from(uri).map_err(|e| format!("the URL is not valid: {e}"))?;
        let mut headers = HeaderMap::with_capacity(self.names.len());
        for (name, value) in self.names.iter().zip(&parts.header_values) {
            if name == http::header::HOST {
                continue;
            }
            let value = HeaderValue::from_bytes(value).map_err(|_| format!("the value of {name} is not valid"))?;
            headers.append(name.clone(), value);
        }
        Ok((uri, headers, parts.body.clone().map(Bytes::from)))
    }

    /// Request number `seq`, or why it cannot be sent (a drawn value HTTP/2 cannot carry).
    pub fn request(
        &self,
        plan: &RequestPlan,
        ctx: &mut RenderCtx,
        seq: u64,
        scratch: &mut RequestParts,
    ) -> Result<(Request<()>, Option<Bytes>), ErrorKind> {
        let (uri, headers, body) = match &self.fixed {
            Some((uri, headers, body)) => (uri.clone(), headers.clone(), body.clone()),
            None => {
                plan.render_parts(ctx, seq, scratch);
                self.build(scratch).map_err(|_| ErrorKind::Protocol)?
            }
        };
        let mut req = Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        Ok((req, body))
    }
}

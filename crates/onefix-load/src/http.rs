//! A lean HTTP/1.1 client connection (over plain TCP or TLS): write a request, read one response (Content-Length,
//! chunked, or until close), classify what went wrong. One request in flight per connection.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::stats::ErrorKind;
use crate::tls::{Handshake, Stream, TlsClient};

const INITIAL_BUF: usize = 16 * 1024;
const MAX_HEAD: usize = 1024 * 1024;
const MAX_HEADERS: usize = 96;

/// What a response said, once read to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// False when the server asked to close the connection (or ended the body by closing).
    pub keep_alive: bool,
}

pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    filled: usize,
    /// Bytes read from the server on this connection.
    pub bytes_in: u64,
    /// Bytes read for the current response.
    response_bytes: u64,
    /// Responses read whole on this connection.
    served: u64,
    /// Not yet counted among the connections the run opened.
    pub uncounted: bool,
    /// The TLS handshake of this connection, until the run has counted it.
    pub handshake: Option<Handshake>,
}

/// Opens a TCP connection, and runs the TLS handshake on it for HTTPS.
pub async fn open_stream(addr: SocketAddr, tls: Option<&TlsClient>) -> Result<(Stream, Option<Handshake>), ErrorKind> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| classify_connect(&e))?;
    let _ = tcp.set_nodelay(true);
    match tls {
        None => Ok((Stream::Plain(tcp), None)),
        Some(client) => {
            let (stream, handshake) = client.handshake(tcp).await?;
            Ok((stream, Some(handshake)))
        }
    }
}

fn classify_connect(e: &io::Error) -> ErrorKind {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
        io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
        _ => ErrorKind::ConnectOther,
    }
}

pub(crate) fn classify_io(e: &io::Error) -> ErrorKind {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => ErrorKind::Closed,
        io::ErrorKind::TimedOut => ErrorKind::Timeout,
        _ => ErrorKind::Io,
    }
}

#[derive(Clone, Copy, Debug)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

impl Conn {
    pub async fn connect(addr: SocketAddr, tls: Option<&TlsClient>) -> Result<Conn, ErrorKind> {
        let (stream, handshake) = open_stream(addr, tls).await?;
        Ok(Conn {
            stream,
            buf: vec![0; INITIAL_BUF],
            filled: 0,
            bytes_in: 0,
            response_bytes: 0,
            served: 0,
            uncounted: true,
            handshake,
        })
    }

    /// True after a failure on a kept-alive connection before any byte of the answer: the
    /// server had closed it while idle, and the request may be sent again on a new one.
    pub fn went_stale(&self) -> bool {
        self.served > 0 && self.response_bytes == 0
    }

    async fn read_more(&mut self) -> Result<usize, ErrorKind> {
        if self.filled == self.buf.len() {
            if self.buf.len() >= MAX_HEAD {
                return Err(ErrorKind::Protocol);
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        match self.stream.read(&mut self.buf[self.filled..]).await {
            Ok(n) => {
                self.filled += n;
                self.bytes_in += n as u64;
                self.response_bytes += n as u64;
                Ok(n)
            }
            Err(e) => Err(classify_io(&e)),
        }
    }

    /// Reads into the whole buffer, discarding what it held (body bytes we only count).
    async fn read_discard(&mut self) -> Result<usize, ErrorKind> {
        self.filled = 0;
        self.read_more().await
    }

    /// Sends one request and reads its response to the end.
    pub async fn round_trip(&mut self, request: &[u8], head_request: bool) -> Result<Response, ErrorKind> {
        self.response_bytes = 0;
        self.stream.write_all(request).await.map_err(|e| classify_io(&e))?;
        if self.stream.is_tls() {
            // rustls may hold the last record until flushed; a plain socket has nothing to flush.
            self.stream.flush().await.map_err(|e| classify_io(&e))?;
        }
        self.filled = 0;
        loop {
            let (status, hlen, framing, keep_alive) = self.read_head(head_request).await?;
            if (100..200).contains(&status) && status != 101 {
                // An interim response (100 Continue): the real one follows.
                self.buf.copy_within(hlen..self.filled, 0);
                self.filled -= hlen;
                continue;
            }
            let keep_alive = self.read_body(hlen, framing).await? && keep_alive;
            self.served += 1;
            return Ok(Response { status, keep_alive });
        }
    }

    async fn read_head(&mut self, head_request: bool) -> Result<(u16, usize, Framing, bool), ErrorKind> {
        loop {
            if self.filled > 0 {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut resp = httparse::Response::new(&mut headers);
                match resp.parse(&self.buf[..self.filled]) {
                    Ok(httparse::Status::Complete(hlen)) => {
                        let status = resp.code.unwrap_or(0);
                        let http11 = resp.version == Some(1);
                        let mut keep_alive = http11;
                        let mut length: Option<u64> = None;
                        let mut chunked = false;
                        for h in resp.headers.iter() {
                            if h.name.eq_ignore_ascii_case("content-length") {
                                let v = std::str::from_utf8(h.value).ok().and_then(|s| s.trim().parse::<u64>().ok());
                                match (v, length) {
                                    (None, _) => return Err(ErrorKind::Protocol),
                                    (Some(v), Some(prev)) if v != prev => return Err(ErrorKind::Protocol),
                                    (Some(v), _) => length = Some(v),
                                }
                            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                                let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
                                chunked = trim(last).eq_ignore_ascii_case(b"chunked");
                            } else if h.name.eq_ignore_ascii_case("connection") {
                                for token in h.value.split(|&b| b == b',') {
                                    let token = trim(token);
                                    if token.eq_ignore_ascii_case(b"close") {
                                        keep_alive = false;
                                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                                        keep_alive = true;
                                    }
                                }
                            }
                        }
                        let framing = if head_request || status == 204 || status == 304 || (100..200).contains(&status)
                        {
                            Framing::None
                        } else if chunked {
                            Framing::Chunked
                        } else if let Some(n) = length {
                            Framing::Length(n)
                        } else {
                            keep_alive = false;
                            Framing::UntilClose
                        };
                        return Ok((status, hlen, framing, keep_alive));
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(_) => return Err(ErrorKind::Protocol),
                }
            }
            let n = self.read_more().await?;
            if n == 0 {
                // Closed before a whole head: with nothing read it is a closed connection,
                // with a part of a head it is a malformed response.
                return Err(if self.filled == 0 { ErrorKind::Closed } else { ErrorKind::Protocol });
            }
        }
    }

    /// Reads the body to its end; returns false when the connection cannot be reused.
    async fn read_body(&mut self, hlen: usize, framing: Framing) -> Result<bool, ErrorKind> {
        let have = (self.filled - hlen) as u64;
        match framing {
            Framing::None => {
                if have > 0 {
                    return Err(ErrorKind::Protocol);
                }
                Ok(true)
            }
            Framing::Length(n) => {
                if have > n {
                    return Err(ErrorKind::Protocol);
                }
                let mut left = n - have;
                while left > 0 {
                    let got = self.read_discard().await? as u64;
                    if got == 0 {
                        return Err(ErrorKind::Closed);
                    }
                    if got > left {
                        return Err(ErrorKind::Protocol);
                    }
                    left -= got;
                }
                Ok(true)
            }
            Framing::Chunked => {
                let mut dec = Chunked::default();
                let mut start = hlen;
                loop {
                    let used = dec.feed(&self.buf[start..self.filled]).map_err(|_| ErrorKind::Protocol)?;
                    if dec.done() {
                        if start + used != self.filled {
                            return Err(ErrorKind::Protocol);
                        }
                        return Ok(true);
                    }
                    if self.read_discard().await? == 0 {
                        return Err(ErrorKind::Closed);
                    }
                    start = 0;
                }
            }
            Framing::UntilClose => {
                while self.read_discard().await? > 0 {}
                Ok(false)
            }
        }
    }
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |i| i + 1);
    &s[start..end]
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    FinalLf,
    Done,
}

/// A chunked-body decoder that only checks and skips.
#[derive(Default, Debug)]
struct Chunked {
    state: ChunkState,
    size: u64,
    digits: u32,
}

impl Chunked {
    fn done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consumes bytes; returns how many were used (all of them unless the body ended).
    fn feed(&mut self, data: &[u8]) -> Result<usize, ()> {
        use ChunkState::*;
        let mut i = 0;
        while i < data.len() {
            if self.state == Done {
                return Ok(i);
            }
            if self.state == Data {
                let take = (self.size as usize).min(data.len() - i);
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = DataCr;
                }
                continue;
            }
            let b = data[i];
            i += 1;
            self.state = match (self.state, b) {
                (Size, b) if b.is_ascii_hexdigit() => {
                    if self.digits >= 15 {
                        return Err(());
                    }
                    self.digits += 1;
                    self.size = self.size * 16 + (b as char).to_digit(16).unwrap() as u64;
                    Size
                }
                (Size, b';' | b' ' | b'\t') if self.digits > 0 => Ext,
                (Size, b'\r') if self.digits > 0 => SizeLf,
                (Size, b'\n') if self.digits > 0 => self.after_size(),
                (Ext, b'\r') => SizeLf,
                (Ext, b'\n') => self.after_size(),
                (Ext, _) => Ext,
                (SizeLf, b'\n') => self.after_size(),
                (DataCr, b'\r') => DataLf,
                (DataCr, b'\n') | (DataLf, b'\n') => {
                    self.size = 0;
                    self.digits = 0;
                    Size
                }
                (TrailerStart, b'\r') => FinalLf,
                (TrailerStart, b'\n') | (FinalLf, b'\n') => Done,
                (TrailerStart, _) | (TrailerLine, _) if b != b'\n' => TrailerLine,
                (TrailerLine, b'\n') => TrailerStart,
                _ => return Err(()),
            };
        }
        Ok(i)
    }

    fn after_size(&mut self) -> ChunkState {
        if self.size == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(parts: &[&[u8]]) -> Result<(bool, usize), ()> {
        let mut d = Chunked::default();
        let mut used = 0;
        for p in parts {
            used = d.feed(p)?;
            if d.done() {
                break;
            }
        }
        Ok((d.done(), used))
    }

    #[test]
    fn chunked_bodies_decode_across_reads() {
        assert_eq!(decode(&[b"5\r\nhello\r\n0\r\n\r\n"]), Ok((true, 15)));
        assert_eq!(
            decode(&[b"5\r", b"\nhel", b"lo\r\n", b"a;ext=1\r\n0123456789\r\n0\r\n", b"X-T: 1\r\n\r\n"]),
            Ok((true, 10))
        );
        assert_eq!(decode(&[b"5\r\nhello\r\n0\r\n\r\nEXTRA"]), Ok((true, 15)));
        assert_eq!(decode(&[b"5\r\nhello\r\n"]), Ok((false, 10)));
        assert!(decode(&[b"zz\r\n"]).is_err());
        assert!(decode(&[b"\r\n"]).is_err());
        assert!(decode(&[b"5\r\nhelloXX"]).is_err());
    }
}

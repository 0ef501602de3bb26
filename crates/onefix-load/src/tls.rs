//! HTTPS: the rustls client configuration (roots, `--cacert`, `--insecure`, ALPN, session
//! tickets), the byte stream a connection reads and writes (plain TCP or TLS), and the probe
//! that says in one sentence why a server cannot be loaded over TLS before the run starts.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::stats::ErrorKind;
use crate::LoadError;

/// How to trust the server over HTTPS.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM certificates to trust instead of the system's store.
    pub cacert: Option<PathBuf>,
    /// Accept any certificate (self-signed test servers): the handshake is still signed.
    pub insecure: bool,
}

/// The protocol the requests are sent in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::Http2 => "HTTP/2",
        }
    }

    fn alpn(self) -> &'static [u8] {
        match self {
            Protocol::Http1 => b"http/1.1",
            Protocol::Http2 => b"h2",
        }
    }
}

/// What a new connection needs for its TLS handshake.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    server_name: ServerName<'static>,
}

/// How a handshake went, for the run's handshake count and time.
#[derive(Clone, Copy, Debug)]
pub struct Handshake {
    pub micros: u64,
    /// The server took a session ticket: an abbreviated handshake.
    pub resumed: bool,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The roots a certificate must chain to: `--cacert`'s, or the system's store.
fn roots(opts: &TlsOptions) -> Result<RootCertStore, LoadError> {
    let mut store = RootCertStore::empty();
    match &opts.cacert {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                LoadError::Input(format!(
                    "cannot read the CA file {}: {}",
                    path.display(),
                    e.to_string().to_lowercase()
                ))
            })?;
            let certs: Vec<CertificateDer<'static>> = rustls_pemfile_certs(&pem);
            if certs.is_empty() {
                return Err(LoadError::Input(format!(
                    "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                    path.display()
                )));
            }
            for c in certs {
                store.add(c).map_err(|e| {
                    LoadError::Input(format!("a certificate in {} cannot be used as a root: {e}", path.display()))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                // One unreadable certificate in the store does not stop the others.
                let _ = store.add(c);
            }
            // An empty store is not refused here: the handshake then fails as "not trusted", and
            // the sentence about it says that this system trusts no authority at all.
        }
    }
    Ok(store)
}

/// The certificates of a PEM file, read with rustls' own PEM reader.
fn rustls_pemfile_certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect()
}

impl TlsClient {
    /// A client for `host` that offers `alpn` (in order of preference).
    pub fn new(opts: &TlsOptions, host: &str, alpn: &[Protocol]) -> Result<TlsClient, LoadError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| LoadError::Input(format!("TLS cannot be set up: {e}")))?;
        let mut config = if opts.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider())))
                .with_no_client_auth()
        } else {
            builder.with_root_certificates(roots(opts)?).with_no_client_auth()
        };
        config.alpn_protocols = alpn.iter().map(|p| p.alpn().to_vec()).collect();
        // Session tickets (the default in-memory store of 256 servers) let a reconnect resume.
        let server_name = ServerName::try_from(host.to_string())
            .map_err(|_| LoadError::Input(format!("`{host}` is not a host name TLS can check a certificate for")))?;
        Ok(TlsClient { connector: TlsConnector::from(Arc::new(config)), server_name })
    }

    /// Runs the handshake on a connected socket.
    pub async fn handshake(&self, tcp: TcpStream) -> Result<(Stream, Handshake), ErrorKind> {
        let started = Instant::now();
        let tls = self.connector.connect(self.server_name.clone(), tcp).await.map_err(|_| ErrorKind::Tls)?;
        let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        let micros = (started.elapsed().as_micros() as u64).max(1);
        Ok((Stream::Tls(Box::new(tls)), Handshake { micros, resumed }))
    }
}

/// `--insecure`: any certificate is accepted, but the handshake's signatures are still checked
/// (the server must hold the key of the certificate it sent).
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The bytes of one connection: plain TCP, or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What the probe learned: the protocol the server agreed to.
pub struct Probed {
    pub protocol: Protocol,
}

/// One handshake before the run, so that a server that cannot be loaded over TLS is said in
/// one sentence (naming the host and what to do) instead of as a column of errors.
/// `want` is the protocol asked for (`--http2` or `--http1.1`), or `None` to follow the server.
pub fn probe(
    opts: &TlsOptions,
    host: &str,
    addr: SocketAddr,
    want: Option<Protocol>,
    limit: Duration,
) -> Result<Probed, LoadError> {
    let offer: &[Protocol] = match want {
        Some(Protocol::Http2) => &[Protocol::Http2],
        Some(Protocol::Http1) => &[Protocol::Http1],
        None => &[Protocol::Http2, Protocol::Http1],
    };
    let client = TlsClient::new(opts, host, offer)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LoadError::Input(format!("cannot start the TLS probe: {e}")))?;
    let where_ = format!("{host} ({addr})");
    rt.block_on(async {
        let tcp = tokio::time::timeout(limit, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                LoadError::Unreachable(format!(
                    "{where_} did not accept a connection within {:.1} s",
                    limit.as_secs_f64()
                ))
            })?
            .map_err(|e| {
                LoadError::Unreachable(format!("cannot connect to {where_}: {}", e.to_string().to_lowercase()))
            })?;
        let handshake = client.connector.connect(client.server_name.clone(), tcp);
        let tls = match tokio::time::timeout(limit, handshake).await {
            Err(_) => {
                return Err(LoadError::Unreachable(format!(
                    "the TLS handshake with {where_} did not finish within {:.1} s: check that the port serves \
                     HTTPS, or raise --timeout",
                    limit.as_secs_f64()
                )))
            }
            Ok(Err(e)) => return Err(LoadError::Unreachable(explain_handshake_error(&e, &where_, opts, want))),
            Ok(Ok(tls)) => tls,
        };
        let chosen = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let protocol = match (want, chosen.as_deref()) {
            (Some(Protocol::Http2), Some(b"h2")) | (None, Some(b"h2")) => Protocol::Http2,
            (Some(Protocol::Http2), other) => {
                let said = match other {
                    Some(p) => format!("it chose {} in ALPN", String::from_utf8_lossy(p)),
                    None => "it chose no protocol in ALPN".to_string(),
                };
                return Err(LoadError::Unreachable(format!(
                    "{where_} refused HTTP/2 ({said}): drop --http2 to load it over HTTP/1.1, or enable HTTP/2 on \
                     the server"
                )));
            }
            _ => Protocol::Http1,
        };
        Ok(Probed { protocol })
    })
}

/// One sentence for a failed handshake: what the server did and what to do about it.
fn explain_handshake_error(e: &io::Error, where_: &str, opts: &TlsOptions, want: Option<Protocol>) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(why)) => {
            let why = describe_certificate_error(why);
            let fix = if opts.cacert.is_some() {
                "check that --cacert holds the CA that signed it, or pass --insecure for a test server"
            } else if rustls_native_certs::load_native_certs().certs.is_empty() {
                "this system trusts no certificate authority (install ca-certificates), so pass the CA that \
                 signed it with --cacert FILE, or --insecure for a self-signed test server"
            } else {
                "pass the CA that signed it with --cacert FILE, or --insecure for a self-signed test server"
            };
            format!("the certificate of {where_} does not verify ({why}): {fix}")
        }
        Some(rustls::Error::InvalidMessage(_)) | Some(rustls::Error::InappropriateMessage { .. }) => {
            format!("{where_} does not speak TLS on this port (its answer is not a TLS handshake): use http:// for a plain server, or the server's HTTPS port")
        }
        Some(rustls::Error::NoApplicationProtocol)
        | Some(rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)) => match want {
            Some(Protocol::Http2) => format!(
                "{where_} refused HTTP/2 (it accepts none of the protocols offered in ALPN): drop --http2 to load it \
                 over HTTP/1.1, or enable HTTP/2 on the server"
            ),
            _ => format!("{where_} refused every protocol offered in ALPN: drop --http1.1 to let it choose"),
        },
        Some(rustls::Error::AlertReceived(alert)) => format!(
            "{where_} ended the TLS handshake with the alert {alert:?}: it may require a client certificate or TLS \
             settings onefix does not offer"
        ),
        Some(other) => format!("the TLS handshake with {where_} failed: {other}"),
        None if e.kind() == io::ErrorKind::UnexpectedEof || e.kind() == io::ErrorKind::ConnectionReset => format!(
            "{where_} closed the connection during the TLS handshake: it does not seem to speak TLS on this port \
             (use http:// for a plain server)"
        ),
        None => format!("the TLS handshake with {where_} failed: {}", e.to_string().to_lowercase()),
    }
}

/// Why a certificate does not verify, in words.
fn describe_certificate_error(e: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match e {
        C::UnknownIssuer => "it is signed by an authority that is not trusted".into(),
        C::NotValidForName | C::NotValidForNameContext { .. } => "it is not issued for this host name".into(),
        C::Expired | C::ExpiredContext { .. } => "it has expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".into(),
        C::BadSignature => "its signature does not verify".into(),
        C::Revoked => "it has been revoked".into(),
        C::Other(other) if format!("{other:?}").contains("CaUsedAsEndEntity") => {
            "it is a CA certificate served as the server's own; serve a certificate signed by that CA".into()
        }
        other => format!("{other}").to_lowercase(),
    }
}

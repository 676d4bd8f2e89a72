//! TLS to PostgreSQL as libpq does it: `sslmode`, `sslrootcert`, `sslcert` and `sslkey` read
//! from a connection string, and the one rustls connector every pgvs3 connection uses (the
//! gateway's pool, its LISTEN connection, migrations and admin commands, the operator's catalog
//! client).
//!
//! libpq's rules, kept here because they surprise: `prefer` and `require` encrypt without
//! checking who answers, unless a root certificate is given, when they check the chain as
//! `verify-ca` does; `verify-ca` checks the chain only; `verify-full` the chain and the host
//! name. `prefer` (the default) falls back to plaintext when the server has no TLS.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, bail};
use percent_encoding::percent_decode_str;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

pub use rustls;

/// libpq's `sslmode` values (`allow` is taken as `prefer`: it only differs in trying
/// plaintext first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn parse(text: &str) -> anyhow::Result<SslMode> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                bail!("invalid sslmode {other:?}: expected disable, allow, prefer, require, verify-ca or verify-full")
            }
        })
    }

    /// What tokio-postgres does before the handshake (whether TLS may be skipped); the
    /// certificate checks are the connector's.
    pub fn negotiation(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// A client certificate chain and its key (`sslcert`, `sslkey`).
pub struct ClientCert {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// The connector: hand it to `Config::connect` (it is cheap to clone).
#[derive(Clone)]
pub struct PgTls {
    config: Arc<rustls::ClientConfig>,
    /// Where the trusted CAs came from (`sslrootcert (path)`), for the reason of a refusal.
    roots_source: Option<String>,
}

impl fmt::Debug for PgTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTls").finish_non_exhaustive()
    }
}

/// Encrypts when the server's `sslmode` asks for it, and verifies nothing (what `prefer` and
/// `require` mean without a root certificate).
impl Default for PgTls {
    fn default() -> PgTls {
        PgTls::new(SslMode::Prefer, Vec::new(), None).expect("a connector without certificates")
    }
}

/// The crypto provider: ring, as the rest of the build.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl PgTls {
    /// A connector for `mode`, trusting `roots` (required by the `verify-*` modes; with
    /// `prefer` and `require` they make the chain checked, as in libpq).
    pub fn new(
        mode: SslMode,
        roots: Vec<CertificateDer<'static>>,
        client: Option<ClientCert>,
    ) -> anyhow::Result<PgTls> {
        let provider = provider();
        if roots.is_empty() && matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
            bail!("sslmode verify-ca and verify-full need the server's CA (sslrootcert)");
        }
        let verifier: Arc<dyn ServerCertVerifier> = if roots.is_empty() {
            Arc::new(Unverified(provider.signature_verification_algorithms))
        } else {
            let mut store = RootCertStore::empty();
            for root in roots {
                store.add(root).context("sslrootcert: an unusable CA certificate")?;
            }
            let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(store), Arc::clone(&provider))
                .build()
                .context("sslrootcert")?;
            if mode == SslMode::VerifyFull {
                chain
            } else {
                Arc::new(ChainOnly(chain))
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match client {
            Some(ClientCert { chain, key }) => builder
                .with_client_auth_cert(chain, key)
                .context("sslcert/sslkey: the key does not fit the certificate")?,
            None => builder.with_no_client_auth(),
        };
        // PostgreSQL 17's direct TLS negotiation (sslnegotiation=direct) requires it; older
        // servers ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(PgTls {
            config: Arc::new(config),
            roots_source: None,
        })
    }
}

/// Parses a connection string (URL or `key=value` form) as libpq would, TLS parameters
/// included (tokio-postgres alone refuses `verify-*`, `sslrootcert`, `sslcert` and `sslkey`).
pub fn parse(conninfo: &str) -> anyhow::Result<(tokio_postgres::Config, PgTls)> {
    let (rest, params) = split_tls_params(conninfo)?;
    let mut config: tokio_postgres::Config = rest.parse().context("invalid PostgreSQL connection string")?;
    let mut mode = SslMode::default();
    let (mut root, mut cert, mut key) = (None, None, None);
    for (name, value) in params {
        match name {
            "sslmode" => mode = SslMode::parse(&value)?,
            "sslrootcert" => root = Some(value),
            "sslcert" => cert = Some(value),
            "sslkey" => key = Some(value),
            _ => unreachable!("split_tls_params takes only these"),
        }
    }
    if root.as_deref() == Some("system") {
        bail!("sslrootcert=system is not supported: give the CA's PEM file");
    }
    let roots = match (&root, mode) {
        (_, SslMode::Disable) | (None, _) => Vec::new(),
        (Some(path), _) => read_certs(Path::new(path)).context("sslrootcert")?,
    };
    let client = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) if mode != SslMode::Disable => Some(ClientCert {
            chain: read_certs(Path::new(&cert)).context("sslcert")?,
            key: read_key(Path::new(&key)).context("sslkey")?,
        }),
        (Some(_), Some(_)) => None,
        _ => bail!("sslcert and sslkey go together"),
    };
    config.ssl_mode(mode.negotiation());
    let mut tls = PgTls::new(mode, roots, client)?;
    tls.roots_source = root
        .filter(|_| mode != SslMode::Disable)
        .map(|path| format!("sslrootcert ({path})"));
    Ok((config, tls))
}

/// What tokio-postgres says (as the cause of its "authentication error") when
/// `channel_binding=require` is not met; it has no error kind of its own to match.
const NOT_BOUND: &str = "server did not use channel binding";

impl PgTls {
    /// Names where the trusted CAs came from (a Kubernetes Secret, say), for the reason of an
    /// unknown-CA refusal.
    pub fn roots_from(mut self, source: impl Into<String>) -> PgTls {
        self.roots_source = Some(source.into());
        self
    }

    /// Why `error` (or one of its causes) means a connection can never succeed as configured,
    /// in words a person can act on; None for an error worth retrying (a server not up yet).
    /// tokio-postgres prints only "error performing TLS handshake" and keeps the reason in its
    /// causes.
    pub fn refusal(&self, error: &(dyn std::error::Error + 'static)) -> Option<String> {
        if let Some(why) = refused_certificate(error) {
            let roots = self.roots_source.as_deref().unwrap_or("the CA certificates given");
            return Some(certificate_refusal(
                why,
                &Refused {
                    whose: "PostgreSQL's",
                    roots,
                    name_remedy: "connect by one of its names, or use sslmode=verify-ca, which does not check the name",
                    see: "see sslmode, sslrootcert",
                },
            ));
        }
        causes(error).any(|cause| cause.to_string() == NOT_BOUND).then(|| {
            "channel_binding=require, but the connection is not channel-bound: pgvs3 does not \
             do SCRAM channel binding (SCRAM-SHA-256-PLUS), so no connection can meet it; use \
             channel_binding=prefer (the default)"
                .to_owned()
        })
    }
}

/// The certificate check a TLS handshake failed, from `error` or one of its causes (rustls's
/// error sits inside the I/O error of the handshake, inside the client's own errors).
pub fn refused_certificate<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a CertificateError> {
    causes(error).find_map(|cause| match cause.downcast_ref::<rustls::Error>() {
        Some(rustls::Error::InvalidCertificate(why)) => Some(why),
        _ => None,
    })
}

/// How a certificate refusal is told to whoever configures the connection.
pub struct Refused<'a> {
    /// Whose certificate: "PostgreSQL's", "origin https://…'s".
    pub whose: &'a str,
    /// Where the trusted CAs came from.
    pub roots: &'a str,
    /// What to do when the certificate does not name the host asked for.
    pub name_remedy: &'a str,
    /// Which settings to look at for any other refusal.
    pub see: &'a str,
}

/// Why a certificate was refused, in words a person can act on: an unknown CA, a host name
/// mismatch, an expired or not yet valid certificate, with what to do about it.
pub fn certificate_refusal(why: &CertificateError, told: &Refused<'_>) -> String {
    let refused = format!("{} TLS certificate is refused", told.whose);
    match why {
        CertificateError::UnknownIssuer => format!(
            "{refused}: unknown CA, it is not issued by a CA in {}; give the CA that issued the \
             server's certificate",
            told.roots
        ),
        CertificateError::NotValidForNameContext { expected, presented } => {
            let names: Vec<&str> = presented.iter().map(|name| presented_name(name)).collect();
            format!(
                "{refused}: host name mismatch, it is not valid for {:?}, the host the connection \
                 asked for (it names {}); {}",
                expected.to_str(),
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                },
                told.name_remedy
            )
        }
        CertificateError::NotValidForName => {
            format!("{refused}: host name mismatch, it is not valid for the host the connection asked for")
        }
        CertificateError::ExpiredContext { time, not_after } => format!(
            "{refused}: expired at {} (now {}); the server needs a renewed certificate",
            utc(*not_after),
            utc(*time)
        ),
        CertificateError::Expired => {
            format!("{refused}: expired (or its validity period is empty); the server needs a renewed certificate")
        }
        CertificateError::NotValidYetContext { time, not_before } => format!(
            "{refused}: not valid yet, only from {} (now {}); check the clocks of this host and of \
             whoever issued it",
            utc(*not_before),
            utc(*time)
        ),
        CertificateError::NotValidYet => format!("{refused}: not valid yet; check the clocks"),
        other => format!("{refused} ({}): {other}", told.see),
    }
}

/// `error` and its causes. An I/O error's `source` skips the error it wraps (where rustls's
/// error is): that one is stepped into instead.
fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    let mut next = Some(error);
    std::iter::from_fn(move || {
        let error = next?;
        next = match error.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            Some(wrapped) => Some(wrapped as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
        Some(error)
    })
}

/// webpki's names of a certificate (`DnsName("db-rw")`, `IpAddress(10.0.0.1)`) as a person
/// writes them.
fn presented_name(name: &str) -> &str {
    name.strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .or_else(|| name.strip_prefix("IpAddress(").and_then(|rest| rest.strip_suffix(')')))
        .unwrap_or(name)
}

/// A certificate time as `2026-12-03 20:09:08 UTC` (days to a civil date: Howard Hinnant's
/// algorithm).
fn utc(time: UnixTime) -> String {
    let secs = time.as_secs();
    let (days, second) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        second / 3_600,
        second % 3_600 / 60,
        second % 60
    )
}

/// Every certificate of a PEM file (a chain, or a CA bundle).
pub fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    pem_certs(&pem).with_context(|| path.display().to_string())
}

/// Every certificate of PEM text.
pub fn pem_certs(pem: &[u8]) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .context("not PEM certificates")?;
    if certs.is_empty() {
        bail!("no PEM certificate in it");
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&pem).with_context(|| format!("no PEM private key in {}", path.display()))
}

/// The parameters tokio-postgres does not know, taken out of `conninfo`; the rest is returned
/// as it was (URL) or re-quoted (`key=value`).
fn split_tls_params(conninfo: &str) -> anyhow::Result<(String, Vec<(&'static str, String)>)> {
    let mut taken = Vec::new();
    let mut take = |name: &str, value: String| match TLS_PARAMS.iter().find(|known| **known == name) {
        Some(known) => {
            taken.push((*known, value));
            true
        }
        None => false,
    };
    if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        let Some((base, query)) = conninfo.split_once('?') else {
            return Ok((conninfo.to_owned(), taken));
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = percent_decode_str(name).decode_utf8().context("connection URL")?;
            let value = percent_decode_str(value).decode_utf8().context("connection URL")?;
            if !take(&name, value.into_owned()) {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, taken));
    }
    let mut rest = String::new();
    for (name, value) in key_values(conninfo)? {
        if !take(&name, value.clone()) {
            let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
            rest.push_str(&format!("{name}='{quoted}' "));
        }
    }
    Ok((rest, taken))
}

/// Every setting of a connection string (URL or `key=value` form) as libpq `key=value` pairs,
/// in order: what another libpq client (DuckDB's postgres extension) needs to connect exactly as
/// we do, TLS checks, client certificate and channel binding included.
pub fn libpq_settings(conninfo: &str) -> anyhow::Result<Vec<(String, String)>> {
    let Some(rest) = conninfo
        .strip_prefix("postgres://")
        .or_else(|| conninfo.strip_prefix("postgresql://"))
    else {
        return key_values(conninfo);
    };
    let decode = |text: &str| -> anyhow::Result<String> {
        Ok(percent_decode_str(text)
            .decode_utf8()
            .context("connection URL")?
            .into_owned())
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, dbname) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = authority.rsplit_once('@').unwrap_or(("", authority));
    let mut settings = Vec::new();
    if !userinfo.is_empty() {
        let (user, password) = userinfo.split_once(':').map_or((userinfo, None), |(u, p)| (u, Some(p)));
        settings.push(("user".to_owned(), decode(user)?));
        if let Some(password) = password {
            settings.push(("password".to_owned(), decode(password)?));
        }
    }
    if !hosts.is_empty() {
        let (mut names, mut ports) = (Vec::new(), Vec::new());
        for host in hosts.split(',') {
            // `[::1]:5432`: the port follows the bracket; else the last `:`.
            let (name, port) = match host.strip_prefix('[') {
                Some(bracketed) => {
                    let (name, after) = bracketed.split_once(']').context("connection URL: an unclosed [")?;
                    (name, after.strip_prefix(':').unwrap_or(""))
                }
                None => host.rsplit_once(':').unwrap_or((host, "")),
            };
            names.push(decode(name)?);
            ports.push(port.to_owned());
        }
        settings.push(("host".to_owned(), names.join(",")));
        if ports.iter().any(|port| !port.is_empty()) {
            settings.push(("port".to_owned(), ports.join(",")));
        }
    }
    if !dbname.is_empty() {
        settings.push(("dbname".to_owned(), decode(dbname)?));
    }
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        settings.push((decode(name)?, decode(value)?));
    }
    Ok(settings)
}

const TLS_PARAMS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// libpq's `key=value` form: values bare or single-quoted, `\` escaping the next character.
fn key_values(conninfo: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut name = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            name.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            bail!("invalid connection string: {name:?} has no value");
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let quoted = chars.next_if_eq(&'\'').is_some();
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => value.push(chars.next().context("invalid connection string: a trailing \\")?),
                Some('\'') if quoted => break,
                Some(c) if quoted || !c.is_whitespace() => value.push(c),
                Some(_) => break,
                None if quoted => bail!("invalid connection string: an unterminated quote"),
                None => break,
            }
        }
        pairs.push((name, value));
    }
}

impl MakeTlsConnect<tokio_postgres::Socket> for PgTls {
    type Stream = TlsStream;
    type TlsConnect = Connect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    /// `host` is empty for a Unix socket, where PostgreSQL answers `prefer` with plaintext:
    /// a host that cannot be a TLS server name fails only if a handshake is attempted.
    fn make_tls_connect(&mut self, host: &str) -> Result<Connect, Self::Error> {
        Ok(Connect {
            config: Arc::clone(&self.config),
            server: ServerName::try_from(host).map(|name| name.to_owned()),
        })
    }
}

/// One connection's handshake, to the server named as in the connection string.
pub struct Connect {
    config: Arc<rustls::ClientConfig>,
    server: Result<ServerName<'static>, rustls::pki_types::InvalidDnsNameError>,
}

impl TlsConnect<tokio_postgres::Socket> for Connect {
    type Stream = TlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream>> + Send>>;

    fn connect(self, socket: tokio_postgres::Socket) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move {
            let server = self
                .server
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
            Ok(TlsStream(connector.connect(server, socket).await?))
        })
    }
}

/// An encrypted connection to PostgreSQL.
pub struct TlsStream(tokio_rustls::client::TlsStream<tokio_postgres::Socket>);

impl tokio_postgres::tls::TlsStream for TlsStream {
    /// None: SCRAM then runs without channel binding, as with libpq's `channel_binding=prefer`
    /// against a server that offers none (a client asking `channel_binding=require` is refused).
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// `prefer`/`require` without a root certificate: any certificate, but the handshake's
/// signatures are still checked (the session is then at least bound to that certificate).
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to the root certificate; the name in it is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_tls_parameters_are_taken_out_and_the_rest_kept() {
        let (rest, taken) = split_tls_params(
            "postgres://u:p%40@h:5433/db?sslmode=verify-full&application_name=a%20b&sslrootcert=%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p%40@h:5433/db?application_name=a%20b");
        assert_eq!(
            taken,
            vec![
                ("sslmode", "verify-full".to_owned()),
                ("sslrootcert", "/ca.pem".to_owned())
            ]
        );
        let (rest, _) = split_tls_params("postgresql://h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgresql://h/db");
    }

    #[test]
    fn every_setting_of_a_url_becomes_a_libpq_pair() {
        let settings = libpq_settings(
            "postgres://u%40x:p%3Aw@h1:5433,[::1]:5434/d%20b?sslmode=verify-full&sslrootcert=%2Fca%20dir%2Fca.pem&channel_binding=require",
        )
        .unwrap();
        let settings: Vec<(&str, &str)> = settings.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(
            settings,
            vec![
                ("user", "u@x"),
                ("password", "p:w"),
                ("host", "h1,::1"),
                ("port", "5433,5434"),
                ("dbname", "d b"),
                ("sslmode", "verify-full"),
                ("sslrootcert", "/ca dir/ca.pem"),
                ("channel_binding", "require"),
            ]
        );
        assert_eq!(
            libpq_settings("host=h sslmode=verify-ca sslcert='/c rt'").unwrap(),
            vec![
                ("host".to_owned(), "h".to_owned()),
                ("sslmode".to_owned(), "verify-ca".to_owned()),
                ("sslcert".to_owned(), "/c rt".to_owned()),
            ]
        );
    }

    #[test]
    fn key_value_tls_parameters_are_taken_out_and_the_rest_requoted() {
        let (rest, taken) =
            split_tls_params("host=h  password = 'it\\'s a  secret' sslmode=require sslkey='/k ey'").unwrap();
        assert_eq!(rest, "host='h' password='it\\'s a  secret' ");
        assert_eq!(
            taken,
            vec![("sslmode", "require".to_owned()), ("sslkey", "/k ey".to_owned())]
        );
        let config: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"it's a  secret"[..]));
        assert!(split_tls_params("host='h").is_err());
        assert!(split_tls_params("host").is_err());
    }

    /// As tokio-postgres hands it over: rustls's error inside the I/O error of the handshake,
    /// inside further context.
    fn refusal(tls: &PgTls, why: CertificateError) -> String {
        let handshake = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::InvalidCertificate(why));
        let error = anyhow::Error::new(handshake).context("error performing TLS handshake");
        tls.refusal(error.as_ref()).expect("a certificate refusal")
    }

    #[test]
    fn each_certificate_refusal_names_its_reason() {
        let tls = PgTls::default().roots_from("sslrootcert (/etc/pg/ca.crt)");
        let unknown = refusal(&tls, CertificateError::UnknownIssuer);
        assert!(
            unknown.contains("unknown CA") && unknown.contains("/etc/pg/ca.crt"),
            "{unknown}"
        );
        let name = refusal(
            &tls,
            CertificateError::NotValidForNameContext {
                expected: ServerName::try_from("db-rw").unwrap(),
                presented: vec!["DnsName(\"db-ro\")".to_owned(), "IpAddress(10.0.0.1)".to_owned()],
            },
        );
        assert!(
            name.contains("host name mismatch")
                && name.contains("\"db-rw\"")
                && name.contains("it names db-ro, 10.0.0.1"),
            "{name}"
        );
        let at = |secs| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
        let expired = refusal(
            &tls,
            CertificateError::ExpiredContext {
                time: at(951_868_800),
                not_after: at(951_782_400),
            },
        );
        assert!(
            expired.contains("expired at 2000-02-29 00:00:00 UTC (now 2000-03-01 00:00:00 UTC)"),
            "{expired}"
        );
        let early = refusal(
            &tls,
            CertificateError::NotValidYetContext {
                time: at(0),
                not_before: at(86_399),
            },
        );
        assert!(
            early.contains("not valid yet, only from 1970-01-01 23:59:59 UTC (now 1970-01-01 00:00:00 UTC)"),
            "{early}"
        );
        assert!(refusal(&tls, CertificateError::Revoked).contains("Revoked"));
        assert!(refusal(&PgTls::default(), CertificateError::UnknownIssuer).contains("the CA certificates given"));
    }

    #[test]
    fn what_retrying_can_mend_is_no_refusal() {
        let tls = PgTls::default();
        let down = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(tls.refusal(&down), None);
        let other = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert_eq!(tls.refusal(&other), None);
    }

    #[test]
    fn modes_map_onto_the_negotiation_and_refuse_what_libpq_refuses() {
        let (config, _) = parse("postgres://h/db").unwrap();
        assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Prefer);
        let (config, _) = parse("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
        let (config, _) = parse("host=h sslmode=require").unwrap();
        assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        let error = parse("postgres://h/db?sslmode=verify-full").unwrap_err();
        assert!(format!("{error:#}").contains("sslrootcert"), "{error:#}");
        assert!(parse("postgres://h/db?sslmode=bogus").is_err());
        assert!(
            parse("postgres://h/db?sslcert=/c").is_err(),
            "a certificate without its key"
        );
        assert!(parse("postgres://h/db?sslmode=require&sslrootcert=/nonexistent").is_err());
    }
}

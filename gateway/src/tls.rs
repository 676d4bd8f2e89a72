//! TLS on the gateway's listeners: the server certificate (re-read when its files change, so a
//! rotation by cert-manager needs no restart), the rustls policy, and the acceptor each
//! listener runs before its protocol.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use pgvs3_pgtls::rustls;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::{TlsArgs, TlsListener};

/// How often, at most, a handshake looks at the certificate files.
const RECHECK: Duration = Duration::from_secs(1);

/// The protocol a listener speaks inside TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/2 or HTTP/1.1 (S3, OJS, admin).
    Http,
    /// HTTP/1.1 only: the console's server. Offered h2, a browser picks it and the console
    /// would not understand it.
    Http1,
    /// Redis clients send no ALPN.
    Resp,
}

impl Protocol {
    /// What the listener offers in ALPN, HTTP/2 first, as clients that can prefer it.
    fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            Protocol::Http => &[b"h2", b"http/1.1"],
            Protocol::Http1 => &[b"http/1.1"],
            Protocol::Resp => &[],
        }
    }
}

/// The listeners' certificate and key, shared by all of them.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    check: Mutex<Check>,
}

#[derive(Debug)]
struct Check {
    at: Instant,
    files: Option<[Stamp; 2]>,
}

/// What tells a rewritten file apart: a Kubernetes Secret volume swaps a symlink to a new file
/// (a new inode); an editor or `cp` changes the modification time or the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    inode: u64,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: metadata.modified().ok(),
        inode: metadata.ino(),
        len: metadata.len(),
    })
}

impl ReloadingCert {
    /// Loads the pair now: a gateway never starts with a certificate it cannot serve.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<ReloadingCert>> {
        let files = [stamp(cert), stamp(key)];
        let current = load_pair(cert, key)?;
        Ok(Arc::new(ReloadingCert {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(current)),
            check: Mutex::new(Check {
                at: Instant::now(),
                files: files[0].zip(files[1]).map(<[Stamp; 2]>::from),
            }),
        }))
    }

    /// Re-reads the pair when a file changed since the last look (at most once a second, by
    /// one handshake while the others go on with the current pair). A pair that does not load
    /// (a half-written rotation, a key that does not fit) leaves the current one in place.
    fn refresh(&self) {
        let Ok(mut check) = self.check.try_lock() else {
            return;
        };
        if check.at.elapsed() < RECHECK {
            return;
        }
        check.at = Instant::now();
        let files = stamp(&self.cert).zip(stamp(&self.key)).map(<[Stamp; 2]>::from);
        if files.is_none() || files == check.files {
            return;
        }
        check.files = files;
        match load_pair(&self.cert, &self.key) {
            Ok(pair) => {
                *self.current.write().expect("certificate lock") = Arc::new(pair);
                tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
            }
            Err(error) => tracing::warn!(
                error = format!("{error:#}"),
                "the changed TLS certificate does not load; still serving the previous one"
            ),
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.refresh();
        Some(Arc::clone(&self.current.read().expect("certificate lock")))
    }
}

fn load_pair(cert: &Path, key: &Path) -> anyhow::Result<CertifiedKey> {
    let chain = pgvs3_pgtls::read_certs(cert).context("--tls-cert")?;
    let key = pgvs3_pgtls::read_key(key).context("--tls-key")?;
    CertifiedKey::from_der(chain, key, &pgvs3_pgtls::provider()).context("--tls-key does not fit --tls-cert")
}

/// A listener's acceptor: rustls's safe defaults (TLS 1.2 and 1.3, forward-secret suites),
/// session resumption by stateless tickets, and, when `client_ca` is given, only clients
/// holding a certificate it issued.
pub fn acceptor(
    cert: &Arc<ReloadingCert>,
    protocol: Protocol,
    client_ca: Option<&Path>,
) -> anyhow::Result<TlsAcceptor> {
    let provider = pgvs3_pgtls::provider();
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match client_ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in pgvs3_pgtls::read_certs(path).context("--admin-tls-client-ca")? {
                roots
                    .add(ca)
                    .context("--admin-tls-client-ca: an unusable CA certificate")?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("--admin-tls-client-ca")?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::clone(cert) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = protocol.alpn().iter().map(|name| name.to_vec()).collect();
    // Resumption skips the certificate signature and key exchange of a full handshake (the
    // cost of a TLS connection to a client that reconnects often); tickets keep no state here.
    config.ticketer = rustls::crypto::ring::Ticketer::new().context("TLS session tickets")?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Each listener's acceptor (`None`: plaintext), from `--tls-*`.
#[derive(Default)]
pub struct ListenerTls {
    pub s3: Option<TlsAcceptor>,
    pub resp: Option<TlsAcceptor>,
    pub ojs: Option<TlsAcceptor>,
    pub admin: Option<TlsAcceptor>,
    /// The console's (HTTP/1.1 only): it speaks TLS when the S3 listener does.
    pub console: Option<TlsAcceptor>,
}

impl ListenerTls {
    pub fn from_args(args: &TlsArgs) -> anyhow::Result<ListenerTls> {
        let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
            return Ok(ListenerTls::default());
        };
        let on = |listener: TlsListener| !args.tls_plaintext.contains(&listener);
        if args.admin_tls_client_ca.is_some() && !on(TlsListener::Admin) {
            anyhow::bail!(
                "--admin-tls-client-ca asks admin clients for a certificate, but --tls-plaintext admin leaves the admin listener plaintext: drop one of them"
            );
        }
        let cert = ReloadingCert::load(cert, key)?;
        let http = acceptor(&cert, Protocol::Http, None)?;
        Ok(ListenerTls {
            s3: on(TlsListener::S3).then(|| http.clone()),
            ojs: on(TlsListener::Ojs).then(|| http.clone()),
            resp: match on(TlsListener::Resp) {
                true => Some(acceptor(&cert, Protocol::Resp, None)?),
                false => None,
            },
            admin: match on(TlsListener::Admin) {
                true => Some(acceptor(&cert, Protocol::Http, args.admin_tls_client_ca.as_deref())?),
                false => None,
            },
            console: match on(TlsListener::S3) {
                true => Some(acceptor(&cert, Protocol::Http1, None)?),
                false => None,
            },
        })
    }
}

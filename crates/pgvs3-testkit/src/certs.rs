//! A throwaway certificate authority for TLS tests, made with the `openssl` command: a CA, and
//! server or client certificates it issues (PEM files in a private directory).

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct TestCa {
    pub dir: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Clone)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Issued {
    pub fn cert_pem(&self) -> Vec<u8> {
        std::fs::read(&self.cert).unwrap()
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl command (Debian package openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl TestCa {
    /// A new CA named `name` (its common name too), in a fresh directory.
    pub fn new(name: &str) -> TestCa {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let unique = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pgvs3-ca-{}-{unique}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        TestCa { dir }
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_cert()).unwrap()
    }

    /// A certificate for `common_name`, valid for the `subject_alt_names` (`DNS:localhost`,
    /// `IP:127.0.0.1`, comma-separated), for servers and clients alike.
    pub fn issue(&self, file: &str, common_name: &str, subject_alt_names: &str) -> Issued {
        let (key, csr, cert, ext) = (
            format!("{file}.key"),
            format!("{file}.csr"),
            format!("{file}.crt"),
            format!("{file}.ext"),
        );
        std::fs::write(
            self.dir.join(&ext),
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
                 extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={subject_alt_names}\n"
            ),
        )
        .unwrap();
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={common_name}"),
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
        Issued {
            cert: self.dir.join(cert),
            key: self.dir.join(key),
        }
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

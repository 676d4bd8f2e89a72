//! What tests of web identity need to act as an OIDC issuer (a Kubernetes API server signing
//! ServiceAccount tokens): keys made with the openssl CLI, their JWKs, and signed JWTs.

use std::process::{Command, Stdio};

use base64::Engine;
use serde_json::{Value, json};

/// Base64url without padding, as JWTs and JWKs spell bytes.
pub fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Runs the openssl CLI with `input` on its standard input; its standard output.
pub fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the openssl CLI");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// A new 2048-bit RSA private key in PEM at `path`.
pub fn rsa_key(path: &str) {
    openssl(&["genrsa", "-out", path, "2048"], b"");
}

/// The public JWK (RS256, `kid`) of the RSA private key at `key`.
pub fn rsa_jwk(key: &str, kid: &str) -> Value {
    let modulus = String::from_utf8(openssl(&["rsa", "-in", key, "-noout", "-modulus"], b"")).unwrap();
    let n = hex::decode(modulus.trim().trim_start_matches("Modulus=")).unwrap();
    json!({"use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256", "n": b64url(&n), "e": "AQAB"})
}

/// `header.claims` in JWT form, ready to sign.
pub fn signing_input(header: &Value, claims: &Value) -> String {
    format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    )
}

/// The SHA-256 signature of `input` with the private key at `key` (PKCS#1 v1.5 for RSA, DER
/// for EC).
pub fn sign_sha256(key: &str, input: &str) -> Vec<u8> {
    openssl(&["dgst", "-sha256", "-sign", key], input.as_bytes())
}

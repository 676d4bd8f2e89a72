//! The master key that encrypts access-key secrets at rest in the catalog (and the data keys of
//! SSE-S3 objects). Gateways open
//! secrets with it; the operator seals the keys it writes with it — one implementation for both.
//!
//! Secrets must be recoverable (SigV4 needs the plain secret to recompute signatures), so they
//! are encrypted, not hashed: AES-256-GCM with a random nonce per secret.

use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use anyhow::{Context, anyhow};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

const NONCE_LEN: usize = 12;
const KEY_FILE: &str = "master.key";

#[derive(Clone)]
pub struct MasterKey {
    cipher: Aes256Gcm,
}

impl MasterKey {
    /// Any string works as a master key: it is stretched to 256 bits with SHA-256, so operators
    /// can use whatever their secret store generates.
    pub fn from_text(text: &str) -> MasterKey {
        let key = Sha256::digest(text.trim().as_bytes());
        MasterKey {
            cipher: Aes256Gcm::new_from_slice(&key).expect("SHA-256 output is a valid AES-256 key"),
        }
    }

    /// Loads the embedded default's key from the data dir, creating it on first use.
    pub fn load_or_create(data_dir: &Path) -> anyhow::Result<MasterKey> {
        let path = data_dir.join(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(MasterKey::from_text(&text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
                let text = random_token(32);
                write_private_file(&path, &text)?;
                Ok(MasterKey::from_text(&text))
            }
            Err(err) => Err(err).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn seal(&self, plaintext: &str) -> Vec<u8> {
        self.seal_bytes(plaintext.as_bytes())
    }

    pub fn open(&self, sealed: &[u8]) -> anyhow::Result<String> {
        let plaintext = self
            .open_bytes(sealed)
            .map_err(|_| anyhow!("cannot decrypt an access-key secret: wrong master key?"))?;
        String::from_utf8(plaintext).context("decrypted secret is not UTF-8")
    }

    /// Seals any short secret (e.g. an object's data key): nonce, then ciphertext and tag.
    pub fn seal_bytes(&self, plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let mut sealed = nonce.to_vec();
        let ciphertext = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plaintext)
            .expect("AES-GCM encryption of a short secret cannot fail");
        sealed.extend_from_slice(&ciphertext);
        sealed
    }

    pub fn open_bytes(&self, sealed: &[u8]) -> anyhow::Result<Vec<u8>> {
        anyhow::ensure!(sealed.len() > NONCE_LEN, "sealed secret is too short");
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| anyhow!("cannot decrypt a sealed secret: wrong master key?"))
    }
}

/// A random URL-safe token of `bytes` bytes of entropy that never begins with `-`: a token
/// pasted after a command-line flag (`--secret-key <token>`) would otherwise be read as a flag.
pub fn random_token(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    loop {
        rand::rng().fill_bytes(&mut raw);
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
        if !token.starts_with('-') {
            return token;
        }
    }
}

fn write_private_file(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_with_the_same_key() {
        let key = MasterKey::from_text("correct horse");
        let sealed = key.seal("s3cr3t");
        assert_ne!(&sealed[NONCE_LEN..], b"s3cr3t");
        assert_eq!(key.open(&sealed).unwrap(), "s3cr3t");
        assert!(MasterKey::from_text("battery staple").open(&sealed).is_err());
        assert_ne!(key.seal("s3cr3t"), sealed, "nonces must differ per seal");
    }

    #[test]
    fn data_dir_key_is_created_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("pgvs3-mk-{}", random_token(6)));
        let sealed = MasterKey::load_or_create(&dir).unwrap().seal("x");
        assert_eq!(MasterKey::load_or_create(&dir).unwrap().open(&sealed).unwrap(), "x");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tokens_never_begin_with_a_dash() {
        // One token in 64 would begin with `-` without the retry: 2000 draws miss it with
        // probability (63/64)^2000 ≈ 2e-14.
        for _ in 0..2000 {
            let token = random_token(6);
            assert!(!token.starts_with('-'), "{token}");
            assert_eq!(token.len(), 8);
        }
    }
}

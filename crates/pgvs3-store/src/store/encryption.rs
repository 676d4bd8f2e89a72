//! Server-side encryption of object bodies: SSE-S3 (a random data key per object, sealed with
//! the master key) and SSE-C (a key per object derived from the customer's key and a random salt;
//! the customer's key is never stored, only a digest that tells a wrong key from the right one).
//!
//! Bodies are encrypted chunk by chunk with AES-256 in counter mode, after compression: a
//! stored chunk keeps the length that tells a compressed chunk from a raw one, a raw chunk
//! still fills one heap page, and any chunk decrypts on its own (ranges read only theirs). The
//! counter block of chunk `seq` of body `body_id` is `body_id ‖ seq ‖ 0`: every body of an object
//! (the parts of a multipart object) has its own id, and every object its own key, so no
//! keystream is ever used twice. Inline bodies use a body id no chunked body has.

use aes::cipher::{KeyIvInit, StreamCipher};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use md5::{Digest as _, Md5};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::{StoreError, StoreResult};
use crate::master_key::MasterKey;

type Aes256Ctr = ctr::Ctr128BE<aes::Aes256>;

/// The body id in the counter block of an inline body (chunked bodies come from a sequence
/// that starts at 1).
const INLINE_BODY: i64 = -1;

/// How an object's body is encrypted, as its metadata keeps it (`se`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Sealed {
    #[serde(rename = "m")]
    pub mode: Mode,
    /// SSE-S3: the data key sealed with the master key; SSE-C: the salt of the derivation
    /// (base64).
    #[serde(rename = "k")]
    material: String,
    /// SSE-C: a digest of the customer's key and the salt, to refuse a wrong key (base64).
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    check: Option<String>,
    /// SSE-C: the base64 MD5 of the customer's key, which S3 echoes on every answer.
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub key_md5: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Mode {
    /// SSE-S3 (`x-amz-server-side-encryption: AES256`).
    S3,
    /// SSE-C (`x-amz-server-side-encryption-customer-*`).
    C,
}

/// A customer-provided key (SSE-C) from a request's headers, its MD5 checked.
#[derive(Clone)]
pub struct CustomerKey {
    key: [u8; 32],
    pub key_md5: String,
}

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomerKey").field("key_md5", &self.key_md5).finish()
    }
}

impl CustomerKey {
    /// The SSE-C key of a request's three headers (algorithm, base64 key, base64 key MD5), with
    /// S3's refusals; `None` when the request names none.
    pub fn from_headers(
        algorithm: Option<&str>,
        key: Option<&str>,
        key_md5: Option<&str>,
    ) -> StoreResult<Option<CustomerKey>> {
        let (algorithm, key) = match (algorithm, key) {
            (None, None) if key_md5.is_none() => return Ok(None),
            (Some(algorithm), Some(key)) => (algorithm, key),
            (Some(_), None) => {
                return Err(StoreError::InvalidArgument(
                    "Requests specifying Server Side Encryption with Customer provided keys must provide an appropriate secret key.".into(),
                ));
            }
            _ => {
                return Err(StoreError::InvalidArgument(
                    "Requests specifying Server Side Encryption with Customer provided keys must provide a valid encryption algorithm.".into(),
                ));
            }
        };
        if algorithm != "AES256" {
            return Err(StoreError::InvalidEncryptionAlgorithm);
        }
        let Some(key_md5) = key_md5 else {
            return Err(StoreError::InvalidArgument(
                "Requests specifying Server Side Encryption with Customer provided keys must provide the client calculated MD5 of the secret key.".into(),
            ));
        };
        let bytes = BASE64
            .decode(key.trim())
            .ok()
            .filter(|bytes| bytes.len() == 32)
            .ok_or_else(|| {
                StoreError::InvalidArgument("The secret key was invalid for the specified algorithm.".into())
            })?;
        if BASE64.encode(Md5::digest(&bytes)) != key_md5.trim() {
            return Err(StoreError::InvalidArgument(
                "The calculated MD5 hash of the key did not match the hash that was provided.".into(),
            ));
        }
        let mut owned = [0u8; 32];
        owned.copy_from_slice(&bytes);
        Ok(Some(CustomerKey {
            key: owned,
            key_md5: key_md5.trim().to_owned(),
        }))
    }

    fn derive(&self, label: &[u8], salt: &[u8]) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(label);
        hasher.update(self.key);
        hasher.update(salt);
        hasher.finalize().into()
    }
}

/// What a write asks for.
#[derive(Debug, Clone, Default)]
pub enum Requested {
    #[default]
    None,
    S3,
    Customer(CustomerKey),
}

/// The key that encrypts one object's body.
#[derive(Clone)]
pub struct ObjectKey([u8; 32]);

impl ObjectKey {
    /// Encrypts or decrypts (the same in counter mode) chunk `seq` of body `body_id` in place.
    pub fn apply(&self, body_id: i64, seq: i64, data: &mut [u8]) {
        let mut counter = [0u8; 16];
        counter[..8].copy_from_slice(&body_id.to_be_bytes());
        counter[8..12].copy_from_slice(&(seq as u32).to_be_bytes());
        let mut cipher = Aes256Ctr::new(&self.0.into(), &counter.into());
        cipher.apply_keystream(data);
    }

    /// Encrypts or decrypts a whole inline body in place.
    pub fn apply_inline(&self, data: &mut [u8]) {
        self.apply(INLINE_BODY, 0, data);
    }
}

/// A new object's encryption: its metadata entry and its key; `None` for a plaintext object.
pub fn seal(requested: &Requested, master: &MasterKey) -> Option<(Sealed, ObjectKey)> {
    match requested {
        Requested::None => None,
        Requested::S3 => {
            let mut key = [0u8; 32];
            rand::rng().fill_bytes(&mut key);
            let sealed = Sealed {
                mode: Mode::S3,
                material: BASE64.encode(master.seal_bytes(&key)),
                check: None,
                key_md5: None,
            };
            Some((sealed, ObjectKey(key)))
        }
        Requested::Customer(customer) => {
            let mut salt = [0u8; 16];
            rand::rng().fill_bytes(&mut salt);
            let sealed = Sealed {
                mode: Mode::C,
                material: BASE64.encode(salt),
                check: Some(BASE64.encode(customer.derive(b"pgvs3 sse-c check", &salt))),
                key_md5: Some(customer.key_md5.clone()),
            };
            Some((sealed, ObjectKey(customer.derive(b"pgvs3 sse-c data", &salt))))
        }
    }
}

/// The key of a stored object, given what the request offers: an SSE-C object needs its key
/// (400 without one, 403 with another), a plaintext object must not be offered one (400), an
/// SSE-S3 object opens with the master key.
pub fn open(
    sealed: Option<&Sealed>,
    offered: Option<&CustomerKey>,
    master: &MasterKey,
) -> StoreResult<Option<ObjectKey>> {
    let Some(sealed) = sealed else {
        return match offered {
            None => Ok(None),
            Some(_) => Err(StoreError::InvalidRequest(
                "The encryption parameters are not applicable to this object.".into(),
            )),
        };
    };
    let corrupt = |what: &str| StoreError::Corrupt(format!("encryption of an object: {what}"));
    match (sealed.mode, offered) {
        (Mode::S3, None) => {
            let sealed_key = BASE64.decode(&sealed.material).map_err(|_| corrupt("sealed key"))?;
            let key = master
                .open_bytes(&sealed_key)
                .map_err(|_| corrupt("the master key does not open the data key"))?;
            let key: [u8; 32] = key.try_into().map_err(|_| corrupt("data key length"))?;
            Ok(Some(ObjectKey(key)))
        }
        (Mode::S3, Some(_)) => Err(StoreError::InvalidRequest(
            "The encryption parameters are not applicable to this object.".into(),
        )),
        (Mode::C, None) => Err(StoreError::InvalidRequest(
            "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object.".into(),
        )),
        (Mode::C, Some(customer)) => {
            let salt = BASE64.decode(&sealed.material).map_err(|_| corrupt("salt"))?;
            let check = BASE64.encode(customer.derive(b"pgvs3 sse-c check", &salt));
            if sealed.check.as_deref() != Some(check.as_str()) {
                return Err(StoreError::WrongCustomerKey(
                    "The SSE-C key provided does not match the key the object was stored with.".into(),
                ));
            }
            Ok(Some(ObjectKey(customer.derive(b"pgvs3 sse-c data", &salt))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn customer(byte: u8) -> CustomerKey {
        let key = [byte; 32];
        CustomerKey::from_headers(
            Some("AES256"),
            Some(&BASE64.encode(key)),
            Some(&BASE64.encode(Md5::digest(key))),
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn a_customer_key_opens_only_its_own_objects() {
        let master = MasterKey::from_text("test");
        let (sealed, key) = seal(&Requested::Customer(customer(1)), &master).unwrap();
        let mut data = b"attack at dawn".to_vec();
        key.apply(7, 3, &mut data);
        assert_ne!(&data, b"attack at dawn");
        let opened = open(Some(&sealed), Some(&customer(1)), &master).unwrap().unwrap();
        opened.apply(7, 3, &mut data);
        assert_eq!(&data, b"attack at dawn");
        assert!(matches!(
            open(Some(&sealed), Some(&customer(2)), &master),
            Err(StoreError::WrongCustomerKey(_))
        ));
        assert!(matches!(
            open(Some(&sealed), None, &master),
            Err(StoreError::InvalidRequest(_))
        ));
        assert!(
            !serde_json::to_string(&sealed)
                .unwrap()
                .contains(&BASE64.encode([1u8; 32]))
        );
    }

    #[test]
    fn sse_s3_keys_differ_per_object_and_open_with_the_master_key() {
        let master = MasterKey::from_text("test");
        let (first, first_key) = seal(&Requested::S3, &master).unwrap();
        let (second, _) = seal(&Requested::S3, &master).unwrap();
        assert_ne!(first, second);
        let mut data = vec![0u8; 100];
        first_key.apply(1, 0, &mut data);
        let opened = open(Some(&first), None, &master).unwrap().unwrap();
        opened.apply(1, 0, &mut data);
        assert_eq!(data, vec![0u8; 100]);
        assert!(open(Some(&first), None, &MasterKey::from_text("other")).is_err());
    }

    #[test]
    fn chunks_of_different_bodies_and_positions_get_different_keystreams() {
        let key = ObjectKey([9; 32]);
        let stream = |body: i64, seq: i64| {
            let mut data = vec![0u8; 32];
            key.apply(body, seq, &mut data);
            data
        };
        assert_ne!(stream(1, 0), stream(2, 0));
        assert_ne!(stream(1, 0), stream(1, 1));
        assert_ne!(stream(INLINE_BODY, 0), stream(1, 0));
    }

    #[test]
    fn customer_key_headers_are_checked_as_s3_checks_them() {
        let key = BASE64.encode([5u8; 32]);
        let md5 = BASE64.encode(Md5::digest([5u8; 32]));
        let parse = |a: Option<&str>, k: Option<&str>, m: Option<&str>| CustomerKey::from_headers(a, k, m);
        assert!(parse(None, None, None).unwrap().is_none());
        assert!(matches!(
            parse(Some("AES256"), None, Some(&md5)),
            Err(StoreError::InvalidArgument(_))
        ));
        assert!(matches!(
            parse(None, Some(&key), Some(&md5)),
            Err(StoreError::InvalidArgument(_))
        ));
        assert!(matches!(
            parse(Some("AES256"), Some(&key), None),
            Err(StoreError::InvalidArgument(_))
        ));
        assert!(matches!(
            parse(Some("AES256"), Some(&key), Some("AAAA")),
            Err(StoreError::InvalidArgument(_))
        ));
        assert!(matches!(
            parse(Some("aws:kms"), Some(&key), Some(&md5)),
            Err(StoreError::InvalidEncryptionAlgorithm)
        ));
        assert!(matches!(
            parse(Some("AES256"), Some(&BASE64.encode([5u8; 16])), Some(&md5)),
            Err(StoreError::InvalidArgument(_))
        ));
        assert!(parse(Some("AES256"), Some(&key), Some(&md5)).unwrap().is_some());
    }
}

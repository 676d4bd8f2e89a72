//! Verification of a web identity token (a Kubernetes ServiceAccount token, a JWT) against its
//! issuer's key set, locally: RS256 (the API server's default) and ES256 only, the key the
//! header's `kid` names and of the algorithm's key type, then the claims. Everything is bounded
//! before it is parsed: the token's length, and the nesting of its JSON.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use ring::signature::{self, UnparsedPublicKey};
use serde::Deserialize;

/// The longest token accepted (AWS's limit is 20,000 characters; a projected ServiceAccount token
/// is about 1 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The deepest nesting of arrays and objects a token's header or claims may have (a real one
/// has 3: claims, `kubernetes.io`, `pod`).
const MAX_JSON_DEPTH: usize = 8;
/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const LEEWAY_SECS: i64 = 60;

/// Why a token was refused; the STS error each is answered with is the caller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a JWT this verifier reads (size, shape, encoding, JSON, nesting).
    Malformed(&'static str),
    /// `alg` is not RS256 or ES256 (`none`, HS256, ...), or the key's type does not match it.
    Algorithm(String),
    /// No key of the issuer's set has the token's `kid`.
    KeyNotFound,
    BadSignature,
    /// `iss` is not the role's issuer, or the issuer is not registered.
    Issuer(String),
    Audience,
    Expired,
    NotYetValid,
}

impl Refusal {
    /// The metric label of the refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Algorithm(_) => "algorithm",
            Refusal::KeyNotFound => "unknown_key",
            Refusal::BadSignature => "signature",
            Refusal::Issuer(_) => "issuer",
            Refusal::Audience => "audience",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
        }
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

/// `aud` is a string or an array of strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// The claims of a token, as read (before any is checked).
#[derive(Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    aud: Audience,
    exp: i64,
    #[serde(default)]
    nbf: Option<i64>,
    #[serde(default)]
    iat: Option<i64>,
    /// What the API server adds about the token's ServiceAccount (and pod).
    #[serde(default, rename = "kubernetes.io")]
    kubernetes: Option<KubernetesClaims>,
}

#[derive(Deserialize)]
struct KubernetesClaims {
    #[serde(default)]
    serviceaccount: Option<ServiceAccountClaim>,
}

#[derive(Deserialize)]
struct ServiceAccountClaim {
    #[serde(default)]
    uid: Option<String>,
}

impl Claims {
    /// The UID of the token's ServiceAccount (`kubernetes.io` → `serviceaccount` → `uid`),
    /// which a role's trust may pin.
    pub fn service_account_uid(&self) -> Option<&str> {
        self.kubernetes.as_ref()?.serviceaccount.as_ref()?.uid.as_deref()
    }

    /// Whether the token was issued for `audience`.
    pub fn for_audience(&self, audience: &str) -> Result<(), Refusal> {
        let audiences = match &self.aud {
            Audience::One(one) => std::slice::from_ref(one),
            Audience::Many(many) => many,
        };
        match audiences.iter().any(|aud| aud == audience) {
            true => Ok(()),
            false => Err(Refusal::Audience),
        }
    }
}

/// A token split and decoded, its signature not yet checked.
pub struct Unverified {
    alg: Algorithm,
    kid: Option<String>,
    signed: Vec<u8>,
    signature: Vec<u8>,
    pub claims: Claims,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    Rs256,
    Es256,
}

/// A verification key of an issuer's set.
#[derive(Debug)]
pub enum Key {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed P-256 point (0x04 || x || y).
    P256(Vec<u8>),
}

/// An issuer's usable keys by `kid` (keys without a `kid` under "").
pub type KeySet = HashMap<String, Arc<Key>>;

fn b64(text: &str) -> Result<Vec<u8>, Refusal> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| Refusal::Malformed("a part is not base64url"))
}

/// Whether `json`'s arrays and objects nest deeper than [`MAX_JSON_DEPTH`] (strings skipped),
/// checked before serde_json, whose own limit is 128.
fn too_deep(json: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in json {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

fn json<T: serde::de::DeserializeOwned>(part: &str, what: &'static str) -> Result<T, Refusal> {
    let bytes = b64(part)?;
    if too_deep(&bytes) {
        return Err(Refusal::Malformed("the token's JSON nests too deep"));
    }
    serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed(what))
}

/// Splits and decodes a token, checking its size, shape and algorithm.
pub fn decode(token: &str) -> Result<Unverified, Refusal> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Refusal::Malformed("the token is over 16 KiB"));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed("a JWT has three parts"));
    };
    let head: Header = json(header, "the token's header is not a JWS header")?;
    let alg = match head.alg.as_str() {
        "RS256" => Algorithm::Rs256,
        "ES256" => Algorithm::Es256,
        other => return Err(Refusal::Algorithm(other.chars().take(16).collect())),
    };
    let claims: Claims = json(payload, "the token's claims lack iss, sub, aud or exp")?;
    Ok(Unverified {
        alg,
        kid: head.kid,
        signed: token.as_bytes()[..header.len() + 1 + payload.len()].to_vec(),
        signature: b64(signature)?,
        claims,
    })
}

impl Unverified {
    /// Checks the signature with the set's key the header names (without a `kid`, any key of
    /// the algorithm's type), then the times (`now` in Unix seconds). The audience is the
    /// role's to check ([`Claims::for_audience`]): the role is read only for a token that
    /// verified.
    pub fn verify(self, keys: &KeySet, now: i64) -> Result<Claims, Refusal> {
        let candidates: Vec<&Arc<Key>> = match &self.kid {
            Some(kid) => keys.get(kid).into_iter().collect(),
            None => keys.values().collect(),
        };
        if candidates.is_empty() {
            return Err(Refusal::KeyNotFound);
        }
        let mut verified = false;
        for key in candidates {
            verified |= match (self.alg, key.as_ref()) {
                (Algorithm::Rs256, Key::Rsa { n, e }) => signature::RsaPublicKeyComponents { n, e }
                    .verify(&signature::RSA_PKCS1_2048_8192_SHA256, &self.signed, &self.signature)
                    .is_ok(),
                (Algorithm::Es256, Key::P256(point)) => {
                    UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                        .verify(&self.signed, &self.signature)
                        .is_ok()
                }
                // The named key is of another type: an algorithm confusion, refused as such.
                (alg, _) if self.kid.is_some() => return Err(Refusal::Algorithm(format!("{alg:?} with this key"))),
                _ => false,
            };
            if verified {
                break;
            }
        }
        if !verified {
            return Err(Refusal::BadSignature);
        }
        let claims = self.claims;
        if claims.exp + LEEWAY_SECS <= now {
            return Err(Refusal::Expired);
        }
        if claims.nbf.is_some_and(|nbf| nbf > now + LEEWAY_SECS)
            || claims.iat.is_some_and(|iat| iat > now + LEEWAY_SECS)
        {
            return Err(Refusal::NotYetValid);
        }
        Ok(claims)
    }
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default, rename = "use")]
    usage: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

/// The usable keys of a JSON Web Key Set (the catalog bounds its size): RSA keys and P-256 EC
/// keys meant for signatures. Others (encryption keys, other curves, malformed) are skipped.
pub fn parse_key_set(jwks: &serde_json::Value) -> KeySet {
    let Some(keys) = jwks.get("keys").and_then(serde_json::Value::as_array) else {
        return KeySet::new();
    };
    keys.iter()
        .filter_map(|key| serde_json::from_value::<Jwk>(key.clone()).ok())
        .filter(|jwk| jwk.usage.as_deref().is_none_or(|usage| usage == "sig"))
        .filter_map(|jwk| {
            let decode = |part: &Option<String>| b64(part.as_deref()?).ok();
            let key = match jwk.kty.as_str() {
                "RSA" => Key::Rsa {
                    n: decode(&jwk.n)?,
                    e: decode(&jwk.e)?,
                },
                "EC" if jwk.crv.as_deref() == Some("P-256") => {
                    let (x, y) = (decode(&jwk.x)?, decode(&jwk.y)?);
                    if x.len() != 32 || y.len() != 32 {
                        return None;
                    }
                    Key::P256([&[4u8][..], &x, &y].concat())
                }
                _ => return None,
            };
            Some((jwk.kid.unwrap_or_default(), Arc::new(key)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(json: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn shapes_algorithms_and_nesting_are_refused_before_any_key() {
        let claims = part(r#"{"iss":"i","sub":"s","aud":"pgvs3","exp":1}"#);
        let token = |header: &str| format!("{}.{claims}.c2ln", part(header));
        for alg in ["none", "HS256", "RS512", "PS256"] {
            assert!(matches!(
                decode(&token(&format!(r#"{{"alg":"{alg}"}}"#))),
                Err(Refusal::Algorithm(_))
            ));
        }
        assert!(decode(&token(r#"{"alg":"RS256","kid":"k"}"#)).is_ok());
        let nested = format!(r#"{{"alg":"RS256","x":{}1{}}}"#, "[".repeat(20), "]".repeat(20));
        assert_eq!(
            decode(&token(&nested)).err(),
            Some(Refusal::Malformed("the token's JSON nests too deep"))
        );
        assert!(matches!(decode("a.b"), Err(Refusal::Malformed(_))));
        assert!(matches!(decode("a.b.c.d"), Err(Refusal::Malformed(_))));
        assert!(matches!(
            decode(&"a".repeat(MAX_TOKEN_BYTES + 1)),
            Err(Refusal::Malformed(_))
        ));
        // Brackets inside strings do not count.
        assert!(!too_deep(br#"{"a":"[[[[[[[[[[[[[[[[[[[["}"#));
    }
}

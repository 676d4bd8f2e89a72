//! Server-side sessions and sign-in throttling. The browser holds only a random session id (an
//! HttpOnly, SameSite=Strict cookie); the key's secret lives here, inside the session's S3
//! clients, and is gone when the session ends.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use rand::RngCore;

/// A session ends this long after sign-in however busy it is.
const MAX_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions held at once; a sign-in beyond it first drops expired ones, then is refused.
const MAX_SESSIONS: usize = 10_000;
/// Ended sessions are dropped (with their RESP connections) at most this long after they end.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// A signed-in key: what a request may use of its session.
#[derive(Clone)]
pub struct Session {
    pub access_key: String,
    /// The synchronizer token every change must carry.
    pub csrf: String,
    /// Signs requests to the gateway's loopback endpoint.
    pub s3: aws_sdk_s3::Client,
    /// Signs presigned URLs for the browser's view of the endpoint.
    pub presign: aws_sdk_s3::Client,
    /// The key's secret, for the RESP listener's `AUTH <key> <secret>` (S3 requests are signed
    /// by the clients above, which hold it too).
    pub secret: std::sync::Arc<str>,
    /// The session's RESP connection (keyspace pages), closed when the session ends.
    pub keyspace: std::sync::Arc<crate::resp::Held>,
    /// A root-key session: the jobs pages are its alone.
    pub admin: bool,
}

struct Entry {
    session: Session,
    created: Instant,
    last_used: Instant,
    /// A one-shot message for the next page (the outcome of a change, after its redirect).
    flash: Option<Flash>,
}

#[derive(Clone)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

pub struct Sessions {
    entries: Mutex<HashMap<String, Entry>>,
    /// When ended sessions were last dropped: they hold RESP connections, so they are not left
    /// until someone presents their id.
    swept: Mutex<Instant>,
    idle: Duration,
    pub throttle: Throttle,
}

/// 32 random bytes, URL-safe: session ids and CSRF tokens.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Compares secrets in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    pub fn new(idle: Duration) -> Sessions {
        Sessions {
            entries: Mutex::new(HashMap::new()),
            swept: Mutex::new(Instant::now()),
            idle,
            throttle: Throttle::default(),
        }
    }

    /// A new session with a fresh id (never one the browser offered: no fixation).
    pub fn create(&self, session: Session) -> Option<String> {
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap();
        if entries.len() >= MAX_SESSIONS {
            entries.retain(|_, entry| self.alive(entry, now));
            if entries.len() >= MAX_SESSIONS {
                return None;
            }
        }
        let id = random_token();
        entries.insert(
            id.clone(),
            Entry {
                session,
                created: now,
                last_used: now,
                flash: None,
            },
        );
        Some(id)
    }

    fn alive(&self, entry: &Entry, now: Instant) -> bool {
        now.duration_since(entry.last_used) < self.idle && now.duration_since(entry.created) < MAX_LIFETIME
    }

    /// The live session of `id`, touched; an expired one is removed.
    pub fn get(&self, id: &str) -> Option<(Session, Option<Flash>)> {
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap();
        {
            let mut swept = self.swept.lock().unwrap();
            if now.duration_since(*swept) >= SWEEP_EVERY {
                *swept = now;
                entries.retain(|_, entry| self.alive(entry, now));
            }
        }
        let entry = entries.get_mut(id)?;
        if !self.alive(entry, now) {
            entries.remove(id);
            return None;
        }
        entry.last_used = now;
        Some((entry.session.clone(), entry.flash.take()))
    }

    pub fn flash(&self, id: &str, ok: bool, text: String) {
        if let Some(entry) = self.entries.lock().unwrap().get_mut(id) {
            entry.flash = Some(Flash { ok, text });
        }
    }

    /// Ends every session of `access_key` (the key was deleted or disabled).
    pub fn end_key(&self, access_key: &str) {
        self.entries
            .lock()
            .unwrap()
            .retain(|_, entry| entry.session.access_key != access_key);
    }

    pub fn remove(&self, id: &str) {
        self.entries.lock().unwrap().remove(id);
    }
}

/// Failed sign-ins per client address and per access key, in a sliding window: past the limit,
/// sign-in is refused (429) until the window has moved on, whether the secret is right or not.
pub struct Throttle {
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

const WINDOW: Duration = Duration::from_secs(300);
const PER_ADDRESS: usize = 20;
const PER_KEY: usize = 5;
/// Addresses and keys tracked at once; a flood of new ones past it is refused outright (it is an
/// attack in itself) rather than evicting the ones being throttled.
const MAX_TRACKED: usize = 100_000;

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle {
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl Throttle {
    /// The buckets a sign-in counts against. IPv6 clients are counted per /64, which one
    /// client usually holds whole.
    pub fn subjects(peer: IpAddr, access_key: &str) -> [(String, usize); 2] {
        let address = match peer {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        };
        [
            (format!("addr {address}"), PER_ADDRESS),
            (format!("key {access_key}"), PER_KEY),
        ]
    }

    pub fn allowed(&self, subjects: &[(String, usize)]) -> bool {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap();
        if failures.len() >= MAX_TRACKED {
            failures.retain(|_, times| times.back().is_some_and(|last| now.duration_since(*last) < WINDOW));
            if failures.len() >= MAX_TRACKED {
                return false;
            }
        }
        subjects.iter().all(|(subject, limit)| {
            failures.get_mut(subject).is_none_or(|times| {
                while times.front().is_some_and(|first| now.duration_since(*first) >= WINDOW) {
                    times.pop_front();
                }
                times.len() < *limit
            })
        })
    }

    pub fn failed(&self, subjects: &[(String, usize)]) {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap();
        for (subject, limit) in subjects {
            let times = failures.entry(subject.clone()).or_default();
            times.push_back(now);
            while times.len() > *limit {
                times.pop_front();
            }
        }
    }
}

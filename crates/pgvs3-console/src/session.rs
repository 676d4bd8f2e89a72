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
/// Sessions one key holds at once; its next sign-in ends its oldest, so no key (whoever holds
/// it) can fill the table and keep everyone else out.
const MAX_SESSIONS_PER_KEY: usize = 20;
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
        let mut held: Vec<(&String, Instant)> = entries
            .iter()
            .filter(|(_, entry)| entry.session.access_key == session.access_key)
            .map(|(id, entry)| (id, entry.created))
            .collect();
        if held.len() >= MAX_SESSIONS_PER_KEY {
            held.sort_by_key(|(_, created)| *created);
            let oldest: Vec<String> = held[..=held.len() - MAX_SESSIONS_PER_KEY]
                .iter()
                .map(|(id, _)| (*id).clone())
                .collect();
            for id in oldest {
                entries.remove(&id);
            }
        }
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

/// Failed sign-ins per client address and per access key from that address, in a sliding
/// window: past either limit, sign-in from that address is refused (429) until the window has
/// moved on, whether the secret is right or not. A key is not locked as a whole: wrong secrets
/// for it from elsewhere would otherwise lock its holder out.
pub struct Throttle {
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

const WINDOW: Duration = Duration::from_secs(300);
const PER_ADDRESS: usize = 20;
const PER_KEY_AND_ADDRESS: usize = 5;
/// Subjects tracked at once; past it the one whose last failure is oldest is forgotten (a flood
/// of new addresses must not refuse everyone).
const MAX_TRACKED: usize = 100_000;

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle {
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl Throttle {
    /// The counts a sign-in is judged by. IPv6 clients are counted per /64, which one client
    /// usually holds whole.
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
            (format!("key {access_key} from {address}"), PER_KEY_AND_ADDRESS),
        ]
    }

    pub fn allowed(&self, subjects: &[(String, usize)]) -> bool {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap();
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
            if !failures.contains_key(subject) && failures.len() >= MAX_TRACKED {
                failures.retain(|_, times| times.back().is_some_and(|last| now.duration_since(*last) < WINDOW));
                if failures.len() >= MAX_TRACKED
                    && let Some(oldest) = failures
                        .iter()
                        .min_by_key(|(_, times)| times.back().copied())
                        .map(|(subject, _)| subject.clone())
                {
                    failures.remove(&oldest);
                }
            }
            let times = failures.entry(subject.clone()).or_default();
            times.push_back(now);
            while times.len() > *limit {
                times.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(access_key: &str) -> Session {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .build();
        let client = aws_sdk_s3::Client::from_conf(config);
        Session {
            access_key: access_key.into(),
            csrf: random_token(),
            s3: client.clone(),
            presign: client,
            secret: "secret".into(),
            keyspace: Default::default(),
            admin: false,
        }
    }

    #[test]
    fn one_key_cannot_hold_more_than_its_share_of_sessions() {
        let sessions = Sessions::new(Duration::from_secs(3600));
        let first = sessions.create(session("busy")).unwrap();
        let mut last = first.clone();
        for _ in 0..MAX_SESSIONS_PER_KEY * 3 {
            last = sessions.create(session("busy")).unwrap();
        }
        let other = sessions.create(session("other")).unwrap();
        let held = sessions.entries.lock().unwrap().len();
        assert_eq!(held, MAX_SESSIONS_PER_KEY + 1, "the busy key's oldest sessions ended");
        assert!(sessions.get(&first).is_none(), "the oldest is gone");
        assert!(sessions.get(&last).is_some() && sessions.get(&other).is_some());
    }

    #[test]
    fn wrong_secrets_from_one_address_do_not_lock_the_key_out_elsewhere() {
        let throttle = Throttle::default();
        let attacker = Throttle::subjects("203.0.113.9".parse().unwrap(), "root");
        for _ in 0..PER_KEY_AND_ADDRESS {
            assert!(throttle.allowed(&attacker));
            throttle.failed(&attacker);
        }
        assert!(
            !throttle.allowed(&attacker),
            "the attacker's address is throttled for the key"
        );
        let holder = Throttle::subjects("198.51.100.7".parse().unwrap(), "root");
        assert!(throttle.allowed(&holder), "the key's holder elsewhere is not");
        // The attacker's address is still counted over all keys.
        let sprayed = Throttle::subjects("203.0.113.9".parse().unwrap(), "another");
        assert!(throttle.allowed(&sprayed));
    }

    #[test]
    fn a_full_table_forgets_its_oldest_rather_than_refusing_everyone() {
        let throttle = Throttle::default();
        {
            let mut failures = throttle.failures.lock().unwrap();
            let now = Instant::now();
            for n in 0..MAX_TRACKED {
                failures.insert(format!("addr flood-{n}"), VecDeque::from([now]));
            }
        }
        let newcomer = Throttle::subjects("192.0.2.1".parse().unwrap(), "root");
        assert!(throttle.allowed(&newcomer));
        throttle.failed(&newcomer);
        let failures = throttle.failures.lock().unwrap();
        assert!(failures.len() <= MAX_TRACKED);
        assert!(newcomer.iter().all(|(subject, _)| failures.contains_key(subject)));
    }
}

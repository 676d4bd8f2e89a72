//! Script bodies compiled once per gateway: the bytecode of each body a run compiled, by the
//! body's text, so that the next run of the same body loads its bytecode instead of parsing it
//! again.
//!
//! Every run gets a fresh interpreter (lua.rs), and parsing was its largest cost: a job queue's
//! scripts are tens of kilobytes of Lua, and the parser took about a fifth of the gateway's
//! samples under BullMQ (docs/benchmarks.md "Scripts compiled once"), inside the run's key
//! locks. Loading a chunk's bytecode skips the lexer and the code generator. Only bytecode this
//! module dumped from a body the parser accepted as text is ever loaded as binary: a client's
//! bytes never are (lua.rs `as_text`). The dump keeps its debug information, so an error names
//! the same chunk and line as one raised from the text.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Most bytes of bodies and their bytecode kept, all together; the oldest go first. A body
/// larger than an eighth of it is compiled at each run, as before.
const MAX_BYTES: usize = 32 << 20;

/// The bytecode of the bodies this gateway ran.
#[derive(Default)]
pub struct Compiled {
    inner: Mutex<Inner>,
}

/// A body's bytecode, and the chunk name it was compiled under (which its errors name).
type Bytecode = (&'static str, Arc<[u8]>);

#[derive(Default)]
struct Inner {
    by_body: HashMap<Arc<[u8]>, Bytecode>,
    /// Oldest first.
    order: VecDeque<Arc<[u8]>>,
    bytes: usize,
}

impl Compiled {
    /// The bytecode `body` compiled to under chunk `name`, if kept.
    pub fn get(&self, name: &str, body: &[u8]) -> Option<Arc<[u8]>> {
        let inner = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match inner.by_body.get(body) {
            Some((kept_name, bytecode)) if *kept_name == name => Some(Arc::clone(bytecode)),
            _ => None,
        }
    }

    /// Keeps `bytecode`, what `body` compiled to under chunk `name`.
    pub fn keep(&self, name: &'static str, body: &[u8], bytecode: Vec<u8>) {
        let size = body.len() + bytecode.len();
        if size > MAX_BYTES / 8 {
            return;
        }
        let body: Arc<[u8]> = body.into();
        let mut inner = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, old)) = inner.by_body.insert(Arc::clone(&body), (name, bytecode.into())) {
            inner.bytes -= body.len() + old.len();
        } else {
            inner.order.push_back(body);
        }
        inner.bytes += size;
        while inner.bytes > MAX_BYTES {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some((_, bytecode)) = inner.by_body.remove(&oldest) {
                inner.bytes -= oldest.len() + bytecode.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_kept_by_text_and_name_within_the_bound() {
        let compiled = Compiled::default();
        let body = b"return 1";
        assert!(compiled.get("user_script", body).is_none());
        compiled.keep("user_script", body, vec![1, 2, 3]);
        assert_eq!(compiled.get("user_script", body).as_deref(), Some(&[1u8, 2, 3][..]));
        // The same text as a function's chunk names another chunk: compiled again.
        assert!(compiled.get("user_function", body).is_none());
        assert!(compiled.get("user_script", b"return 2").is_none());

        // Past the bound the oldest bodies go; the total stays within it.
        let big = vec![0u8; MAX_BYTES / 10];
        for i in 0..20u8 {
            compiled.keep("user_script", &[i; 100], big.clone());
        }
        let inner = compiled.inner.lock().unwrap();
        assert!(inner.bytes <= MAX_BYTES, "{}", inner.bytes);
        assert!(inner.by_body.len() < 20);
        assert_eq!(inner.by_body.len(), inner.order.len());
        assert!(inner.by_body.contains_key(&[19u8; 100][..]));
        assert!(!inner.by_body.contains_key(&body[..]));
        drop(inner);

        // Too large for the bound: not kept at all.
        let huge = vec![7u8; MAX_BYTES / 4];
        compiled.keep("user_script", &huge, vec![0]);
        assert!(compiled.get("user_script", &huge).is_none());
    }
}

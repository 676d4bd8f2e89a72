//! OBJECT's answers that are not about one key: HELP, and FREQ's refusal (the key commands
//! ENCODING, FREQ, IDLETIME and REFCOUNT are answered from the batch in `keys.rs`).

use crate::resp::codec::Reply;

/// FREQ's answer: pgvs3 tracks no access frequency, and its policy (CONFIG GET
/// maxmemory-policy) is `noeviction`, under which Redis answers this.
pub const NO_LFU: &str = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

/// OBJECT HELP, Redis 7.0's text.
pub fn help() -> Reply {
    const LINES: &[&str] = &[
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>. The returned integer is",
        "    proportional to the logarithm of the recent access frequency of the key.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(LINES.iter().map(|line| Reply::Status((*line).to_owned())).collect())
}

//! The working set's zsets: what a zset key holds, and the calls on it predicted.

use super::Known;
use crate::store::{Loaded, TypedCall, TypedRow};

/// Loads a zset key (see [`Loaded`]).
pub const LOAD: &str = "SELECT $1::bigint IS NULL AND $2::text IS NULL AND $3::bigint IS NULL AS present, false AS too_large, NULL::bytea[] AS items, NULL::bytea[] AS vals,
        NULL::float8[] AS scores, NULL::int8[] AS ints";

#[derive(Debug, Clone)]
pub struct Zset {}

impl Zset {
    pub fn from_loaded(_loaded: Loaded) -> Option<Zset> {
        None
    }

    pub fn bytes(&self) -> usize {
        0
    }
}

/// The row of a call on a zset (see [`super::predict`]).
pub fn predict(_call: &TypedCall, _known: &mut Known) -> Option<TypedRow> {
    None
}

//! The GEO commands on sorted sets, as Redis 7.0's geo.c: a position is a member whose score
//! is its 52-bit geohash (geohash.rs). GEOADD is ZADD of those scores; GEOPOS, GEODIST and
//! GEOHASH decode ZMSCORE's; a search reads the (at most nine) score ranges Redis reads, with
//! ZRANGEBYSCORE in one round trip, and filters, sorts and cuts them in the gateway, bounded by
//! [`MAX_GEO_BYTES`] of members read.

use bytes::Bytes;

use super::family::{self, FamilyError, word, words};
use super::geohash::{self, LAT_MAX, LAT_MIN, LONG_MAX, LONG_MIN, Shape};
use crate::resp::codec::Reply;
use crate::resp::command::{key, parse_float, parse_integer, syntax_error};
use crate::store::{KeyType, KvBatch, KvValue};

/// Most bytes of members one search reads (they are filtered in the gateway's memory).
pub const MAX_GEO_BYTES: i64 = 64 << 20;

#[derive(Debug, Clone)]
pub enum Geo {
    /// ZADD's words after the key (options, then score-member pairs).
    Add {
        key: String,
        zadd: Vec<Bytes>,
    },
    Pos {
        key: String,
        members: Vec<Bytes>,
    },
    Dist {
        key: String,
        a: Bytes,
        b: Bytes,
        unit: f64,
    },
    Hash {
        key: String,
        members: Vec<Bytes>,
    },
    Search(Box<Search>),
}

#[derive(Debug, Clone)]
enum Center {
    Member(Bytes),
    LonLat(f64, f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    None,
    Asc,
    Desc,
}

#[derive(Debug, Clone)]
pub struct Search {
    key: String,
    store: Option<String>,
    /// GEOSEARCH / GEOSEARCHSTORE (not a GEORADIUS form): its STORE's event is
    /// `geosearchstore`, GEORADIUS's `georadiusstore`.
    geosearch: bool,
    store_dist: bool,
    center: Option<Center>,
    /// In the unit's measure; `conversion` meters a unit.
    shape: Option<Shape>,
    conversion: f64,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    order: Order,
    count: i64,
    any: bool,
}

fn float(arg: &[u8], message: &str) -> Result<f64, Reply> {
    parse_float(arg)
        .filter(|value| !value.is_nan())
        .ok_or_else(|| Reply::error(format!("ERR {message}")))
}

/// A longitude and latitude, checked as `extractLongLatOrReply`.
fn lon_lat(args: &[Bytes]) -> Result<(f64, f64), Reply> {
    let x = float(&args[0], "value is not a valid float")?;
    let y = float(&args[1], "value is not a valid float")?;
    if !(LONG_MIN..=LONG_MAX).contains(&x) || !(LAT_MIN..=LAT_MAX).contains(&y) {
        return Err(Reply::error(format!(
            "ERR invalid longitude,latitude pair {x:.6},{y:.6}"
        )));
    }
    Ok((x, y))
}

fn unit(arg: &[u8]) -> Result<f64, Reply> {
    Ok(match arg.to_ascii_lowercase().as_slice() {
        b"m" => 1.0,
        b"km" => 1000.0,
        b"ft" => 0.3048,
        b"mi" => 1609.34,
        _ => return Err(Reply::error("ERR unsupported unit provided. please use M, KM, FT, MI")),
    })
}

/// `radius unit`, as `extractDistanceOrReply`.
fn radius(args: &[Bytes]) -> Result<(f64, f64), Reply> {
    let distance = float(&args[0], "need numeric radius")?;
    if distance < 0.0 {
        return Err(Reply::error("ERR radius cannot be negative"));
    }
    Ok((distance, unit(&args[1])?))
}

impl Geo {
    pub fn parse(name: &str, args: &[Bytes]) -> Result<Option<Geo>, Reply> {
        let members = || args[2..].to_vec();
        Ok(Some(match name {
            "geoadd" => {
                let mut at = 2;
                let (mut nx, mut xx) = (false, false);
                while let Some(option) = args.get(at) {
                    match option.to_ascii_lowercase().as_slice() {
                        b"nx" => nx = true,
                        b"xx" => xx = true,
                        b"ch" => {}
                        _ => break,
                    }
                    at += 1;
                }
                if !(args.len() - at).is_multiple_of(3) || (nx && xx) {
                    return Err(syntax_error());
                }
                let mut zadd = args[2..at].to_vec();
                for triple in args[at..].chunks(3) {
                    let (x, y) = lon_lat(&triple[..2])?;
                    zadd.push(word(&geohash::score(x, y).to_string()));
                    zadd.push(triple[2].clone());
                }
                Geo::Add {
                    key: key(&args[1])?,
                    zadd,
                }
            }
            "geopos" => Geo::Pos {
                key: key(&args[1])?,
                members: members(),
            },
            "geohash" => Geo::Hash {
                key: key(&args[1])?,
                members: members(),
            },
            "geodist" => Geo::Dist {
                key: key(&args[1])?,
                a: args[2].clone(),
                b: args[3].clone(),
                unit: match args.len() {
                    4 => 1.0,
                    5 => unit(&args[4])?,
                    _ => return Err(syntax_error()),
                },
            },
            "georadius"
            | "georadius_ro"
            | "georadiusbymember"
            | "georadiusbymember_ro"
            | "geosearch"
            | "geosearchstore" => Geo::Search(Box::new(Search::parse(name, args)?)),
            _ => return Ok(None),
        }))
    }

    pub fn keys(&self) -> Vec<&String> {
        match self {
            Geo::Add { key, .. } | Geo::Pos { key, .. } | Geo::Dist { key, .. } | Geo::Hash { key, .. } => vec![key],
            Geo::Search(search) => std::iter::once(&search.key).chain(&search.store).collect(),
        }
    }

    pub async fn apply(&self, batch: &mut KvBatch) -> Result<Reply, FamilyError> {
        match self {
            Geo::Add { key, zadd } => {
                let row = family::run(batch, vec![words("zadd", key, zadd.iter().cloned())], None).await?;
                batch.reload(std::slice::from_ref(key)).await?;
                Ok(Reply::Integer(row.first().and_then(|row| row.n).unwrap_or(0)))
            }
            Geo::Pos { key, members } => Ok(Reply::Array(
                scores(batch, key, members)
                    .await?
                    .into_iter()
                    .map(|score| match score {
                        None => Reply::NilArray,
                        Some(score) => {
                            let (x, y) = geohash::decode(score);
                            Reply::Array(vec![
                                Reply::text(&geohash::format_coordinate(x)),
                                Reply::text(&geohash::format_coordinate(y)),
                            ])
                        }
                    })
                    .collect(),
            )),
            Geo::Hash { key, members } => Ok(Reply::Array(
                scores(batch, key, members)
                    .await?
                    .into_iter()
                    .map(|score| score.map_or(Reply::Nil, |score| Reply::text(&geohash::standard_geohash(score))))
                    .collect(),
            )),
            Geo::Dist { key, a, b, unit } => {
                if batch.get(key).is_none() {
                    return Ok(Reply::Nil);
                }
                let found = scores(batch, key, &[a.clone(), b.clone()]).await?;
                let [Some(a), Some(b)] = found[..] else {
                    return Ok(Reply::Nil);
                };
                let ((x1, y1), (x2, y2)) = (geohash::decode(a), geohash::decode(b));
                Ok(Reply::text(&geohash::format_distance(
                    geohash::distance(x1, y1, x2, y2) / unit,
                )))
            }
            Geo::Search(search) => search.apply(batch).await,
        }
    }
}

/// Checks that the key is a sorted set (or missing): WRONGTYPE otherwise; whether it exists.
fn zset_exists(batch: &KvBatch, key: &str) -> Result<bool, FamilyError> {
    match batch.get(key).map(|entry| &entry.value) {
        None => Ok(false),
        Some(KvValue::Typed(KeyType::Zset)) => Ok(true),
        Some(_) => Err(FamilyError::Reply(crate::resp::keys::wrongtype())),
    }
}

/// The members' scores (`None`: not a member), nothing read for a missing key.
async fn scores(batch: &mut KvBatch, key: &str, members: &[Bytes]) -> Result<Vec<Option<f64>>, FamilyError> {
    if !zset_exists(batch, key)? {
        return Ok(vec![None; members.len()]);
    }
    let row = family::run(batch, vec![words("zmscore", key, members.iter().cloned())], None).await?;
    Ok(row.into_iter().next().map(|row| row.scores).unwrap_or_default())
}

impl Search {
    /// Where a STORE form stores, with Redis's keyspace event for it.
    pub fn stored_at(&self) -> Option<(&String, &'static str)> {
        let event = match self.geosearch {
            true => "geosearchstore",
            false => "georadiusstore",
        };
        self.store.as_ref().map(|store| (store, event))
    }

    /// Redis's `georadiusGeneric` argument parsing, in its order and with its errors.
    fn parse(name: &str, args: &[Bytes]) -> Result<Search, Reply> {
        let search = name.starts_with("geosearch");
        let store_command = name == "geosearchstore";
        let no_store = name.ends_with("_ro");
        let mut found = Search {
            key: key(&args[if store_command { 2 } else { 1 }])?,
            store: if store_command { Some(key(&args[1])?) } else { None },
            geosearch: search,
            store_dist: false,
            center: None,
            shape: None,
            conversion: 1.0,
            with_dist: false,
            with_hash: false,
            with_coord: false,
            order: Order::None,
            count: 0,
            any: false,
        };
        let base = match name {
            "georadius" | "georadius_ro" => {
                let (x, y) = lon_lat(&args[2..4])?;
                found.center = Some(Center::LonLat(x, y));
                let (radius, conversion) = radius(&args[4..6])?;
                (found.shape, found.conversion) = (Some(Shape::Radius(radius)), conversion);
                6
            }
            "georadiusbymember" | "georadiusbymember_ro" => {
                found.center = Some(Center::Member(args[2].clone()));
                let (radius, conversion) = radius(&args[3..5])?;
                (found.shape, found.conversion) = (Some(Shape::Radius(radius)), conversion);
                5
            }
            _ if store_command => 3,
            _ => 2,
        };
        let (mut from_member, mut from_loc, mut by_radius, mut by_box) = (false, false, false, false);
        let rest = &args[base..];
        let mut i = 0;
        while i < rest.len() {
            let remaining = rest.len();
            match rest[i].to_ascii_lowercase().as_slice() {
                b"withdist" => found.with_dist = true,
                b"withhash" => found.with_hash = true,
                b"withcoord" => found.with_coord = true,
                b"any" => found.any = true,
                b"asc" => found.order = Order::Asc,
                b"desc" => found.order = Order::Desc,
                b"count" if i + 1 < remaining => {
                    let count = parse_integer(&rest[i + 1]).ok_or_else(crate::resp::command::not_an_integer)?;
                    if count <= 0 {
                        return Err(Reply::error("ERR COUNT must be > 0"));
                    }
                    found.count = count;
                    i += 1;
                }
                option @ (b"store" | b"storedist") if i + 1 < remaining && !no_store && !search => {
                    found.store = Some(key(&rest[i + 1])?);
                    found.store_dist = option == b"storedist";
                    i += 1;
                }
                b"storedist" if store_command => found.store_dist = true,
                b"frommember" if i + 1 < remaining && search && !from_loc => {
                    found.center = Some(Center::Member(rest[i + 1].clone()));
                    from_member = true;
                    i += 1;
                }
                b"fromlonlat" if i + 2 < remaining && search && !from_member => {
                    let (x, y) = lon_lat(&rest[i + 1..i + 3])?;
                    found.center = Some(Center::LonLat(x, y));
                    from_loc = true;
                    i += 2;
                }
                b"byradius" if i + 2 < remaining && search && !by_box => {
                    let (radius, conversion) = radius(&rest[i + 1..i + 3])?;
                    (found.shape, found.conversion) = (Some(Shape::Radius(radius)), conversion);
                    by_radius = true;
                    i += 2;
                }
                b"bybox" if i + 3 < remaining && search && !by_radius => {
                    let width = float(&rest[i + 1], "need numeric width")?;
                    let height = float(&rest[i + 2], "need numeric height")?;
                    if width < 0.0 || height < 0.0 {
                        return Err(Reply::error("ERR height or width cannot be negative"));
                    }
                    found.conversion = unit(&rest[i + 3])?;
                    found.shape = Some(Shape::Box(width, height));
                    by_box = true;
                    i += 3;
                }
                _ => return Err(syntax_error()),
            }
            i += 1;
        }
        if found.store.is_some() && (found.with_dist || found.with_hash || found.with_coord) {
            let what = if store_command {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            };
            return Err(Reply::error(format!(
                "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
            )));
        }
        let typed_name = String::from_utf8_lossy(&args[0]);
        if search && !(from_member || from_loc) {
            return Err(Reply::error(format!(
                "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {typed_name}"
            )));
        }
        if search && !(by_radius || by_box) {
            return Err(Reply::error(format!(
                "ERR exactly one of BYRADIUS and BYBOX can be specified for {typed_name}"
            )));
        }
        if found.any && found.count == 0 {
            return Err(Reply::error("ERR the ANY argument requires COUNT argument"));
        }
        Ok(found)
    }

    async fn apply(&self, batch: &mut KvBatch) -> Result<Reply, FamilyError> {
        if !zset_exists(batch, &self.key)? {
            return match &self.store {
                Some(store) => {
                    family::replace(batch, store, None).await?;
                    Ok(Reply::Integer(0))
                }
                None => Ok(Reply::Array(Vec::new())),
            };
        }
        let center = match self.center.as_ref().expect("checked when parsed") {
            Center::LonLat(x, y) => (*x, *y),
            Center::Member(member) => match scores(batch, &self.key, std::slice::from_ref(member)).await?[..] {
                [Some(score)] => geohash::decode(score),
                _ => return Err(Reply::error("ERR could not decode requested zset member").into()),
            },
        };
        let shape = match self.shape.expect("checked when parsed") {
            Shape::Radius(radius) => Shape::Radius(radius * self.conversion),
            Shape::Box(width, height) => Shape::Box(width * self.conversion, height * self.conversion),
        };
        let ranges = geohash::search_ranges(shape, center);
        let commands = ranges
            .iter()
            .map(|(min, max)| {
                words(
                    "zrangebyscore",
                    &self.key,
                    [word(&min.to_string()), word(&format!("({max}")), word("WITHSCORES")],
                )
            })
            .collect();
        let what = if self.store.is_some() {
            "a GEO search and store"
        } else {
            "a GEO search"
        };
        let rows = family::run(batch, commands, Some((MAX_GEO_BYTES, what))).await?;
        let limit = if self.any { self.count as usize } else { 0 };
        // Member, position, distance (meters), score.
        let mut points: Vec<(Bytes, (f64, f64), f64, f64)> = Vec::new();
        'ranges: for row in rows {
            for (member, score) in row.items.into_iter().zip(row.scores) {
                let score = score.unwrap_or_default();
                let position = geohash::decode(score);
                if let Some(distance) = geohash::within(shape, center, position) {
                    points.push((member.unwrap_or_default(), position, distance, score));
                }
                if limit > 0 && points.len() >= limit {
                    break 'ranges;
                }
            }
        }
        let order = match self.order {
            Order::None if self.count != 0 && !self.any => Order::Asc,
            order => order,
        };
        match order {
            Order::Asc => points.sort_by(|a, b| a.2.total_cmp(&b.2)),
            Order::Desc => points.sort_by(|a, b| b.2.total_cmp(&a.2)),
            Order::None => {}
        }
        if self.count > 0 {
            points.truncate(self.count as usize);
        }
        if let Some(store) = &self.store {
            let stored = points.len() as i64;
            let zadd = (!points.is_empty()).then(|| {
                let pairs = points.into_iter().flat_map(|(member, _, distance, score)| {
                    let score = if self.store_dist {
                        distance / self.conversion
                    } else {
                        score
                    };
                    [word(&score.to_string()), member]
                });
                words("zadd", store, pairs)
            });
            family::replace(batch, store, zadd).await?;
            return Ok(Reply::Integer(stored));
        }
        let options = usize::from(self.with_dist) + usize::from(self.with_hash) + usize::from(self.with_coord);
        Ok(Reply::Array(
            points
                .into_iter()
                .map(|(member, (x, y), distance, score)| {
                    if options == 0 {
                        return Reply::Bulk(member);
                    }
                    let mut item = vec![Reply::Bulk(member)];
                    if self.with_dist {
                        item.push(Reply::text(&geohash::format_distance(distance / self.conversion)));
                    }
                    if self.with_hash {
                        item.push(Reply::Integer(score as i64));
                    }
                    if self.with_coord {
                        item.push(Reply::Array(vec![
                            Reply::text(&geohash::format_coordinate(x)),
                            Reply::text(&geohash::format_coordinate(y)),
                        ]));
                    }
                    Reply::Array(item)
                })
                .collect(),
        ))
    }
}

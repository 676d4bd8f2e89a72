//! Redis's geohash (geohash.c, geohash_helper.c, Redis 7.0): 52-bit interleaved scores, their
//! decoding to the cell's centre, the nine cells a radius or box search reads, and the
//! haversine distance, computed as redis-server computes them so that positions, distances and
//! search results are its own.

pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const STEP_MAX: u8 = 26;
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits {
    pub bits: u64,
    pub step: u8,
}

impl Bits {
    const ZERO: Bits = Bits { bits: 0, step: 0 };
}

#[derive(Debug, Clone, Copy)]
struct Range {
    min: f64,
    max: f64,
}

const WGS84_LONG: Range = Range {
    min: LONG_MIN,
    max: LONG_MAX,
};
const WGS84_LAT: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};

fn interleave64(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
    ];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (u64::from(xlo), u64::from(ylo));
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
        0x00000000FFFFFFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let (mut x, mut y) = (interleaved, interleaved >> 1);
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

fn encode_in(long_range: Range, lat_range: Range, longitude: f64, latitude: f64, step: u8) -> Option<Bits> {
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return None;
    }
    if latitude < lat_range.min || latitude > lat_range.max || longitude < long_range.min || longitude > long_range.max
    {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (latitude - lat_range.min) / (lat_range.max - lat_range.min) * scale;
    let long_offset = (longitude - long_range.min) / (long_range.max - long_range.min) * scale;
    Some(Bits {
        bits: interleave64(lat_offset as u32, long_offset as u32),
        step,
    })
}

/// A checked position's 52-bit score (GEOADD's).
pub fn score(longitude: f64, latitude: f64) -> u64 {
    encode_in(WGS84_LONG, WGS84_LAT, longitude, latitude, STEP_MAX).map_or(0, align52)
}

fn align52(hash: Bits) -> u64 {
    hash.bits << (52 - u32::from(hash.step) * 2)
}

/// A cell: its longitude and latitude ranges.
#[derive(Debug, Clone, Copy)]
struct Area {
    longitude: Range,
    latitude: Range,
}

fn decode_in(long_range: Range, lat_range: Range, hash: Bits) -> Area {
    let separated = deinterleave64(hash.bits);
    let lat_scale = lat_range.max - lat_range.min;
    let long_scale = long_range.max - long_range.min;
    let ilato = separated as u32;
    let ilono = (separated >> 32) as u32;
    let cells = (1u64 << hash.step) as f64;
    Area {
        latitude: Range {
            min: lat_range.min + (f64::from(ilato) * 1.0 / cells) * lat_scale,
            max: lat_range.min + ((f64::from(ilato) + 1.0) * 1.0 / cells) * lat_scale,
        },
        longitude: Range {
            min: long_range.min + (f64::from(ilono) * 1.0 / cells) * long_scale,
            max: long_range.min + ((f64::from(ilono) + 1.0) * 1.0 / cells) * long_scale,
        },
    }
}

/// A score's position `(longitude, latitude)`: its cell's centre, within the limits.
pub fn decode(score: f64) -> (f64, f64) {
    let area = decode_in(
        WGS84_LONG,
        WGS84_LAT,
        Bits {
            bits: score as u64,
            step: STEP_MAX,
        },
    );
    let x = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let y = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (x, y)
}

/// GEOHASH's 11 characters: the position encoded again with the standard ±90° latitudes.
pub fn standard_geohash(score: f64) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (x, y) = decode(score);
    let hash = encode_in(
        Range {
            min: -180.0,
            max: 180.0,
        },
        Range { min: -90.0, max: 90.0 },
        x,
        y,
        26,
    )
    .unwrap_or(Bits::ZERO);
    (0..11)
        .map(|i| match i {
            10 => '0',
            _ => ALPHABET[((hash.bits >> (52 - (i + 1) * 5)) & 0x1f) as usize] as char,
        })
        .collect()
}

fn deg_rad(angle: f64) -> f64 {
    angle * D_R
}

fn rad_deg(angle: f64) -> f64 {
    angle / D_R
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// The haversine distance in meters, as `geohashGetDistance`.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (deg_rad(lon1), deg_rad(lon2));
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// What a search covers, in meters.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    Radius(f64),
    /// Width and height.
    Box(f64, f64),
}

/// Whether the point is in the shape around the centre, and its distance from it.
pub fn within(shape: Shape, center: (f64, f64), point: (f64, f64)) -> Option<f64> {
    match shape {
        Shape::Radius(radius) => {
            let distance = distance(center.0, center.1, point.0, point.1);
            (distance <= radius).then_some(distance)
        }
        Shape::Box(width, height) => {
            if lat_distance(point.1, center.1) > height / 2.0 {
                return None;
            }
            if distance(point.0, point.1, center.0, point.1) > width / 2.0 {
                return None;
            }
            Some(distance(center.0, center.1, point.0, point.1))
        }
    }
}

fn estimate_steps(mut range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_meters < MERCATOR_MAX {
        range_meters *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

fn move_x(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let y = hash.bits & 0x5555555555555555;
    let zz = 0x5555555555555555u64 >> (64 - u32::from(hash.step) * 2);
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaaaaaaaaaaaaaau64 >> (64 - u32::from(hash.step) * 2);
    hash.bits = x | y;
}

fn move_y(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let mut y = hash.bits & 0x5555555555555555;
    let zz = 0xaaaaaaaaaaaaaaaau64 >> (64 - u32::from(hash.step) * 2);
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555555555555555u64 >> (64 - u32::from(hash.step) * 2);
    hash.bits = x | y;
}

fn moved(hash: Bits, dx: i8, dy: i8) -> Bits {
    let mut moved = hash;
    move_x(&mut moved, dx);
    move_y(&mut moved, dy);
    moved
}

/// The score ranges `[min, max)` a search reads, in Redis's order (the centre cell, north,
/// south, east, west, north-east, north-west, south-east, south-west), the useless cells
/// and a cell the same as the one before left out; and the bounding box's check on
/// `geohashCalculateAreasByShapeWGS84`.
pub fn search_ranges(shape: Shape, center: (f64, f64)) -> Vec<(u64, u64)> {
    let (longitude, latitude) = center;
    let (half_height, half_width) = match shape {
        Shape::Radius(radius) => (radius, radius),
        Shape::Box(width, height) => (height / 2.0, width / 2.0),
    };
    let lat_delta = rad_deg(half_height / EARTH_RADIUS_IN_METERS);
    let long_delta_top = rad_deg(half_width / EARTH_RADIUS_IN_METERS / deg_rad(latitude + lat_delta).cos());
    let long_delta_bottom = rad_deg(half_width / EARTH_RADIUS_IN_METERS / deg_rad(latitude - lat_delta).cos());
    let southern = latitude < 0.0;
    let min_lon = if southern {
        longitude - long_delta_bottom
    } else {
        longitude - long_delta_top
    };
    let max_lon = if southern {
        longitude + long_delta_bottom
    } else {
        longitude + long_delta_top
    };
    let (min_lat, max_lat) = (latitude - lat_delta, latitude + lat_delta);
    let radius_meters = match shape {
        Shape::Radius(radius) => radius,
        Shape::Box(width, height) => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
    };
    let mut steps = estimate_steps(radius_meters, latitude);
    let cells = |steps: u8| {
        let hash =
            encode_in(WGS84_LONG, WGS84_LAT, longitude, latitude, steps).unwrap_or(Bits { bits: 0, step: steps });
        let neighbors = [
            hash,
            moved(hash, 0, 1),
            moved(hash, 0, -1),
            moved(hash, 1, 0),
            moved(hash, -1, 0),
            moved(hash, 1, 1),
            moved(hash, -1, 1),
            moved(hash, 1, -1),
            moved(hash, -1, -1),
        ];
        (neighbors, decode_in(WGS84_LONG, WGS84_LAT, hash))
    };
    let (mut neighbors, mut area) = cells(steps);
    let decrease = {
        let [_, north, south, east, west, ..] = neighbors.map(|cell| decode_in(WGS84_LONG, WGS84_LAT, cell));
        north.latitude.max < max_lat
            || south.latitude.min > min_lat
            || east.longitude.max < max_lon
            || west.longitude.min > min_lon
    };
    if steps > 1 && decrease {
        steps -= 1;
        (neighbors, area) = cells(steps);
    }
    if steps >= 2 {
        let mut zero = |indexes: [usize; 3]| {
            for index in indexes {
                neighbors[index] = Bits::ZERO;
            }
        };
        if area.latitude.min < min_lat {
            zero([2, 8, 7]);
        }
        if area.latitude.max > max_lat {
            zero([1, 5, 6]);
        }
        if area.longitude.min < min_lon {
            zero([4, 8, 6]);
        }
        if area.longitude.max > max_lon {
            zero([3, 7, 5]);
        }
    }
    let mut ranges = Vec::with_capacity(9);
    let mut last: Option<Bits> = None;
    for cell in neighbors {
        if cell == Bits::ZERO || last == Some(cell) {
            continue;
        }
        last = Some(cell);
        let next = Bits {
            bits: cell.bits + 1,
            step: cell.step,
        };
        ranges.push((align52(cell), align52(next)));
    }
    ranges
}

/// A distance as Redis answers one: four decimals, rounded half to even.
pub fn format_distance(meters: f64) -> String {
    if meters == 0.0 {
        return "0.0000".to_owned();
    }
    let scaled = (meters * 10_000.0).round_ties_even() as i64;
    let sign = if scaled < 0 { "-" } else { "" };
    let scaled = scaled.unsigned_abs();
    format!("{sign}{}.{:04}", scaled / 10_000, scaled % 10_000)
}

/// A coordinate as Redis answers one (`%.17Lf`, trailing zeros dropped).
pub fn format_coordinate(value: f64) -> String {
    let text = format!("{value:.17}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    match text {
        "-0" => "0".to_owned(),
        text => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palermo_is_where_redis_puts_it() {
        // redis-server 7.0.15: GEOADD g 13.361389 38.115556 Palermo; ZSCORE, GEOPOS, GEOHASH.
        let score = score(13.361389, 38.115556);
        assert_eq!(score, 3479099956230698);
        let (x, y) = decode(score as f64);
        assert_eq!(format_coordinate(x), "13.36138933897018433");
        assert_eq!(format_coordinate(y), "38.11555639549629859");
        assert_eq!(standard_geohash(score as f64), "sqc8b49rny0");
    }
}

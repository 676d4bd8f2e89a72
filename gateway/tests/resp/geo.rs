//! The GEO commands over the wire, each reply compared with redis-server 7.0.15's reply to the
//! same command (run live, see pgvs3-testkit's resp::live): scores, positions, distances, geohashes and
//! searches (sorted and in Redis's own unsorted order) over a few hundred points.

use pgvs3_testkit as common;

use common::TestGateway;
use common::resp::RawResp;

use common::resp::live::{LiveRedis, same_lines, same_replies};

/// Points spread over Sicily and around it, the same on every run.
fn points() -> Vec<String> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut words = vec!["GEOADD".to_owned(), "points".to_owned()];
    for n in 0..300 {
        words.push(format!("{:.6}", 11.0 + 6.0 * next()));
        words.push(format!("{:.6}", 35.5 + 4.0 * next()));
        words.push(format!("p{n}"));
    }
    words
}

#[tokio::test]
async fn geo_answers_as_redis_server() {
    let gateway = TestGateway::with_resp(&[]).await;
    let redis = LiveRedis::start().await;
    let mut ours = RawResp::connect(gateway.resp_addr()).await;
    let mut theirs = redis.connect().await;
    let add = points();
    let add: Vec<&str> = add.iter().map(String::as_str).collect();
    same_replies(&mut ours, &mut theirs, &[&add]).await;
    same_lines(
        &mut ours,
        &mut theirs,
        &[
            "GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
            "GEOADD Sicily NX 13 38 Palermo 12.5 37.8 Marsala",
            "GEOADD Sicily XX CH 13.361389 38.115556 Palermo 15 37 Nowhere",
            "GEOADD Sicily CH 15.087269 37.502669 Catania 14.0 37.5 Caltanissetta",
            "ZRANGE Sicily 0 -1 WITHSCORES",
            "GEOPOS Sicily Palermo Catania missing",
            "GEOPOS missing a",
            "GEODIST Sicily Palermo Catania",
            "GEODIST Sicily Palermo Catania km",
            "GEODIST Sicily Palermo Catania MI",
            "GEODIST Sicily Palermo Catania ft",
            "GEODIST Sicily Palermo Palermo",
            "GEODIST Sicily Palermo missing",
            "GEODIST missing a b",
            "GEODIST Sicily Palermo Catania yards",
            "GEOHASH Sicily Palermo Catania missing",
            "GEOHASH missing a",
            "GEOPOS points p0 p1 p299",
            "GEOHASH points p0 p17 p299",
            // Searches: sorted, unsorted (Redis's order of cells and scores), counted, ANY.
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 50 km ASC",
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 50 km",
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 120 km DESC WITHDIST WITHCOORD WITHHASH",
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 300 km COUNT 7",
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 300 km COUNT 7 ANY",
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 300 km COUNT 7 ANY DESC",
            "GEOSEARCH points FROMMEMBER p3 BYBOX 100 60 km ASC WITHDIST",
            "GEOSEARCH points FROMMEMBER p3 BYBOX 100 60 km",
            "GEOSEARCH points FROMLONLAT 12 36 BYBOX 400 200 mi WITHCOORD",
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 2000 km COUNT 3",
            "GEOSEARCH points FROMLONLAT 0 0 BYRADIUS 10 km",
            "GEOSEARCH points FROMLONLAT 14 37.5 BYRADIUS 0 m",
            "GEORADIUS points 15 37 80 km WITHDIST ASC",
            "GEORADIUS points 15 37 80 km",
            "GEORADIUS_RO points 15 37 80000 m COUNT 4 DESC WITHHASH",
            "GEORADIUSBYMEMBER points p10 70 km WITHCOORD",
            "GEORADIUSBYMEMBER_RO points p10 70 km ASC",
            // Stored: the members with their scores, or their distances.
            "GEOSEARCHSTORE near points FROMLONLAT 14 37.5 BYRADIUS 60 km ASC",
            "ZRANGE near 0 -1 WITHSCORES",
            "GEOSEARCHSTORE near points FROMLONLAT 14 37.5 BYRADIUS 60 km STOREDIST",
            "ZRANGE near 0 -1 WITHSCORES",
            "GEORADIUS points 15 37 50 km STORE stored",
            "ZRANGE stored 0 -1 WITHSCORES",
            "GEORADIUSBYMEMBER points p10 50 km STOREDIST stored",
            "ZRANGE stored 0 -1 WITHSCORES",
            "GEOSEARCHSTORE stored points FROMLONLAT 0 0 BYRADIUS 1 km",
            "EXISTS stored",
            "GEOSEARCHSTORE near missing FROMLONLAT 0 0 BYRADIUS 1 km",
            "EXISTS near",
            "GEOSEARCH missing FROMMEMBER x BYRADIUS 1 km",
            // Errors.
            "GEOADD Sicily 181 0 x",
            "GEOADD Sicily 0 86 x",
            "GEOADD Sicily NX XX 1 1 x",
            "GEOADD Sicily 1 1 x 2",
            "GEOADD Sicily a 1 x",
            "SET string x",
            "GEOADD string 1 1 x",
            "GEOPOS string x",
            "GEOSEARCH string FROMLONLAT 0 0 BYRADIUS 1 km",
            "GEOSEARCH points FROMMEMBER nobody BYRADIUS 1 km",
            "GEOSEARCH points BYRADIUS 1 km",
            "GEOSEARCH points FROMLONLAT 0 0 ASC",
            "GEOSEARCH points FROMLONLAT 0 0 BYRADIUS -1 km",
            "GEOSEARCH points FROMLONLAT 0 0 BYRADIUS x km",
            "GEOSEARCH points FROMLONLAT 0 0 BYRADIUS 1 parsec",
            "GEOSEARCH points FROMLONLAT 0 0 BYBOX 1 -1 km",
            "GEOSEARCH points FROMLONLAT 0 0 BYRADIUS 1 km ANY",
            "GEOSEARCH points FROMLONLAT 0 0 BYRADIUS 1 km COUNT 0",
            "GEOSEARCH points FROMLONLAT 0 0 BYRADIUS 1 km STORE x",
            "GEOSEARCHSTORE x points FROMLONLAT 0 0 BYRADIUS 1 km WITHDIST",
            "GEORADIUS points 15 37 50 km WITHDIST STORE x",
            "GEORADIUS_RO points 15 37 50 km STORE x",
        ],
    )
    .await;
}

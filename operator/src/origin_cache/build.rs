//! OriginCache → the arguments of `pgvs3.put_origin` (all but the origin's credentials, which
//! come from a Secret at reconcile time) and the id of the cache bucket's own key. Pure.

use serde::Serialize;

use crate::bucket::build::key_id_of;
use crate::crd::{AddressingStyle, CacheMode, OriginCache};

pub const FINALIZER: &str = "pgvs3.io/origincache-cleanup";

/// The catalog namespace of cache buckets' objects (as `pgvs3.put_origin` creates them).
pub const CACHE_NAMESPACE: &str = "s3w";

/// The access key id of the cache bucket's own key.
pub fn access_key_id(cache: &OriginCache) -> String {
    key_id_of(cache, "PGVS3C")
}

/// The catalog row of a cache bucket, as `pgvs3.put_origin` takes it: durations in seconds,
/// sizes in bytes, widths as the catalog's columns. Serialized (by `render`) with the SQL
/// argument names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OriginRow {
    pub bucket: String,
    pub endpoint: String,
    pub origin_bucket: String,
    pub region: String,
    pub cache_mode: &'static str,
    pub path_style: bool,
    pub ttl_seconds: i32,
    pub negative_ttl_seconds: i32,
    pub fill_concurrency: i32,
    pub size_limit_bytes: Option<i64>,
    pub write_back_threshold: i64,
    pub range_chunk_bytes: i32,
}

/// Seconds in `30s`, `10m`, `1h` (the forms the CRD's CEL rule admits).
pub fn seconds(duration: &str) -> Option<i64> {
    let split = duration.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = duration.split_at(split);
    let number: i64 = number.parse().ok()?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// A duration field in seconds as the catalog's `integer` column holds them.
fn catalog_seconds(field: &str, duration: &str) -> Result<i32, String> {
    let seconds = seconds(duration).ok_or_else(|| format!("invalid {field} {duration:?} (like 30s, 10m or 1h)"))?;
    i32::try_from(seconds).map_err(|_| format!("{field} {duration:?} is longer than {} seconds", i32::MAX))
}

pub fn cache_mode(mode: CacheMode) -> &'static str {
    match mode {
        CacheMode::ReadThrough => "read-through",
        CacheMode::WriteThrough => "write-through",
        CacheMode::WriteBack => "write-back",
    }
}

/// The row for `cache`, or what is wrong with its spec (beyond what the CRD schema checks).
pub fn origin_row(cache: &OriginCache) -> Result<OriginRow, String> {
    let spec = &cache.spec;
    let range_chunk_bytes = i32::try_from(spec.range_chunk_size)
        .ok()
        .filter(|bytes| (64 << 10..=64 << 20).contains(bytes))
        .ok_or_else(|| format!("rangeChunkSize {} is not within 64 KiB..64 MiB", spec.range_chunk_size))?;
    Ok(OriginRow {
        bucket: spec.bucket.clone(),
        endpoint: spec.origin.endpoint.trim_end_matches('/').to_string(),
        origin_bucket: spec.origin.bucket.clone(),
        region: spec.origin.region.clone(),
        cache_mode: cache_mode(spec.mode),
        path_style: spec.origin.style == AddressingStyle::Path,
        ttl_seconds: catalog_seconds("ttl", &spec.ttl)?,
        negative_ttl_seconds: catalog_seconds("negativeTtl", &spec.negative_ttl)?,
        fill_concurrency: spec.fill_concurrency,
        size_limit_bytes: spec.max_bytes,
        write_back_threshold: spec.write_back_threshold,
        range_chunk_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "origin: {endpoint: 'https://s3.example/', bucket: o}";

    fn cache(extra: &str) -> OriginCache {
        cache_of(ORIGIN, extra)
    }

    fn cache_of(origin: &str, extra: &str) -> OriginCache {
        serde_saphyr::from_str(&format!(
            "apiVersion: pgvs3.io/v1alpha1\nkind: OriginCache\nmetadata: {{name: c, namespace: ns}}\n\
             spec: {{gatewayPoolRef: p, bucket: cache-b, credentialsSecretRef: s, {origin}{extra}}}"
        ))
        .unwrap()
    }

    #[test]
    fn durations_parse() {
        assert_eq!(seconds("90s"), Some(90));
        assert_eq!(seconds("10m"), Some(600));
        assert_eq!(seconds("2h"), Some(7200));
        assert_eq!(seconds("2d"), None);
        assert_eq!(seconds("h"), None);
    }

    #[test]
    fn defaults_are_the_gateways() {
        let row = origin_row(&cache("")).unwrap();
        assert_eq!(row.bucket, "cache-b");
        assert_eq!(row.endpoint, "https://s3.example");
        assert_eq!((row.origin_bucket.as_str(), row.region.as_str()), ("o", "us-east-1"));
        assert_eq!(row.cache_mode, "read-through");
        assert!(row.path_style);
        assert_eq!((row.ttl_seconds, row.negative_ttl_seconds), (3600, 0));
        assert_eq!(row.fill_concurrency, 8);
        assert_eq!(row.size_limit_bytes, None);
        assert_eq!(row.write_back_threshold, 8 << 20);
        assert_eq!(row.range_chunk_bytes, 1 << 20);
    }

    #[test]
    fn every_setting_maps_onto_its_column() {
        let row = origin_row(&cache_of(
            "origin: {endpoint: 'http://o:9000', bucket: b, region: eu, style: VirtualHost}",
            ", mode: WriteBack, writeBackThreshold: 1048576, ttl: 5m, negativeTtl: 30s, rangeChunkSize: 65536, \
             fillConcurrency: 32, maxBytes: 1000000",
        ))
        .unwrap();
        assert_eq!(
            row,
            OriginRow {
                bucket: "cache-b".into(),
                endpoint: "http://o:9000".into(),
                origin_bucket: "b".into(),
                region: "eu".into(),
                cache_mode: "write-back",
                path_style: false,
                ttl_seconds: 300,
                negative_ttl_seconds: 30,
                fill_concurrency: 32,
                size_limit_bytes: Some(1_000_000),
                write_back_threshold: 1 << 20,
                range_chunk_bytes: 64 << 10,
            }
        );
        assert_eq!(cache_mode(CacheMode::WriteThrough), "write-through");
    }

    #[test]
    fn what_the_catalog_cannot_hold_is_refused() {
        assert!(
            origin_row(&cache(", ttl: forever"))
                .unwrap_err()
                .contains("invalid ttl")
        );
        let err = origin_row(&cache(", negativeTtl: 999999999999h")).unwrap_err();
        assert!(err.contains("longer than"), "{err}");
        let err = origin_row(&cache(", rangeChunkSize: 134217728")).unwrap_err();
        assert!(err.contains("rangeChunkSize"), "{err}");
    }
}

//! OriginCache → the origin row the catalog will hold. Pure.

use serde::Serialize;

use crate::crd::{AddressingStyle, CacheMode, OriginCache};

/// Arguments of the future `pgvs3.put_origin(...)`, durations in seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginRow {
    pub cache_bucket: String,
    pub endpoint: String,
    pub region: String,
    pub origin_bucket: String,
    pub virtual_host_style: bool,
    pub mode: &'static str,
    pub ttl_seconds: i64,
    pub negative_ttl_seconds: i64,
    pub range_chunk_size: i64,
    pub fill_concurrency: i32,
    pub write_back_threshold: Option<i64>,
    pub max_bytes: Option<i64>,
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

pub fn origin_row(cache: &OriginCache) -> Result<OriginRow, String> {
    let spec = &cache.spec;
    let ttl = seconds(&spec.ttl).ok_or_else(|| format!("invalid ttl {:?}", spec.ttl))?;
    let negative_ttl =
        seconds(&spec.negative_ttl).ok_or_else(|| format!("invalid negativeTtl {:?}", spec.negative_ttl))?;
    Ok(OriginRow {
        cache_bucket: spec.bucket.clone(),
        endpoint: spec.origin.endpoint.trim_end_matches('/').to_string(),
        region: spec.origin.region.clone(),
        origin_bucket: spec.origin.bucket.clone(),
        virtual_host_style: spec.origin.style == AddressingStyle::VirtualHost,
        mode: match spec.mode {
            CacheMode::ReadThrough => "read-through",
            CacheMode::WriteThrough => "write-through",
            CacheMode::WriteBack => "write-back",
        },
        ttl_seconds: ttl,
        negative_ttl_seconds: negative_ttl,
        range_chunk_size: spec.range_chunk_size,
        fill_concurrency: spec.fill_concurrency,
        write_back_threshold: spec.write_back_threshold,
        max_bytes: spec.max_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(extra: &str) -> OriginCache {
        serde_saphyr::from_str(&format!(
            "apiVersion: pgvs3.io/v1alpha1\nkind: OriginCache\nmetadata: {{name: c, namespace: ns}}\n\
             spec: {{gatewayPoolRef: p, bucket: cache-b, origin: {{endpoint: 'https://s3.example/', bucket: o}}{extra}}}"
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
    fn defaults_fill_the_row() {
        let row = origin_row(&cache("")).unwrap();
        assert_eq!(row.endpoint, "https://s3.example");
        assert_eq!(row.mode, "read-through");
        assert_eq!((row.ttl_seconds, row.negative_ttl_seconds), (3600, 60));
        assert_eq!(row.range_chunk_size, 8 << 20);
        assert!(!row.virtual_host_style);
    }

    #[test]
    fn write_back_and_bad_ttl() {
        let row = origin_row(&cache(", mode: WriteBack, writeBackThreshold: 1048576, ttl: 5m")).unwrap();
        assert_eq!(
            (row.mode, row.write_back_threshold, row.ttl_seconds),
            ("write-back", Some(1 << 20), 300)
        );
        assert!(origin_row(&cache(", ttl: forever")).is_err());
    }
}

//! The base domains of virtual-host-style requests (`--s3-domain`): `Host: <bucket>.<base>`
//! names a bucket whatever port the client put in the header; any other host is path style.

use s3s::S3Result;
use s3s::host::{MultiDomain, S3Host, VirtualHost};

/// s3s's `MultiDomain` compares the whole Host header, port included, with each base, so
/// `--s3-domain s3.local` never matched `Host: bkt.s3.local:9000`, and a host matching no base
/// (`localhost:9000`) was taken for a bucket name. This compares host names without ports.
#[derive(Debug)]
pub struct Domains {
    /// Lowercase, without a port.
    bases: Vec<String>,
}

impl Domains {
    /// The bases as configured; a port given with one (what used to be needed) is ignored.
    pub fn new(domains: &[String]) -> anyhow::Result<Domains> {
        let bases: Vec<String> = domains
            .iter()
            .map(|domain| without_port(domain.trim()).to_ascii_lowercase())
            .collect();
        // s3s's checks: valid names that do not overlap.
        MultiDomain::new(&bases).map_err(|err| anyhow::anyhow!("--s3-domain {}: {err}", domains.join(",")))?;
        Ok(Domains { bases })
    }
}

impl S3Host for Domains {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = without_port(host);
        for base in &self.bases {
            if name.eq_ignore_ascii_case(base) {
                return Ok(VirtualHost::new(base.as_str()));
            }
            // `<bucket>.<base>`: the byte before the base is a dot (so both slices fall on
            // character boundaries) and the bucket is not empty.
            let Some(dot) = name.len().checked_sub(base.len() + 1) else {
                continue;
            };
            if dot > 0 && name.as_bytes()[dot] == b'.' && name[dot + 1..].eq_ignore_ascii_case(base) {
                let bucket = &name[..dot];
                // Host names are case-insensitive; bucket names are lowercase.
                let bucket = match bucket.bytes().any(|b| b.is_ascii_uppercase()) {
                    true => std::borrow::Cow::Owned(bucket.to_ascii_lowercase()),
                    false => std::borrow::Cow::Borrowed(bucket),
                };
                return Ok(VirtualHost::new(base.as_str()).with_bucket(bucket));
            }
        }
        Ok(VirtualHost::new(name))
    }
}

/// `host` without a trailing `:port`. (s3s routes IP literals, with or without a port, as path
/// style before asking this.)
fn without_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bucket_of(domains: &Domains, host: &str) -> Option<String> {
        domains.parse_host_header(host).unwrap().bucket().map(str::to_owned)
    }

    #[test]
    fn a_base_matches_with_or_without_a_port() {
        let domains = Domains::new(&["s3.local".into(), "s3.example.com:9000".into()]).unwrap();
        assert_eq!(bucket_of(&domains, "bkt.s3.local:9000").as_deref(), Some("bkt"));
        assert_eq!(bucket_of(&domains, "bkt.s3.local").as_deref(), Some("bkt"));
        assert_eq!(bucket_of(&domains, "Bkt.S3.Local").as_deref(), Some("bkt"));
        assert_eq!(bucket_of(&domains, "a.b.s3.example.com:80").as_deref(), Some("a.b"));
        assert_eq!(bucket_of(&domains, "s3.local:9000"), None);
        assert_eq!(bucket_of(&domains, "localhost:9000"), None, "path style");
        assert_eq!(bucket_of(&domains, "xs3.local"), None, "not a subdomain");
        assert_eq!(bucket_of(&domains, ".s3.local"), None);
        assert!(Domains::new(&["s3.local".into(), "a.s3.local".into()]).is_err());
        assert!(Domains::new(&["bad domain".into()]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn the_bucket_is_what_precedes_the_base(bucket in "[a-z0-9][a-z0-9.-]{0,20}", port in proptest::option::of(any::<u16>())) {
            let domains = Domains::new(&["s3.pgvs3.test".into()]).unwrap();
            let host = match port {
                Some(port) => format!("{bucket}.s3.pgvs3.test:{port}"),
                None => format!("{bucket}.s3.pgvs3.test"),
            };
            prop_assert_eq!(bucket_of(&domains, &host), Some(bucket));
        }

        #[test]
        fn any_host_header_gets_an_answer(host in "\\PC{0,40}") {
            let domains = Domains::new(&["s3.local".into()]).unwrap();
            prop_assert!(domains.parse_host_header(&host).is_ok());
        }
    }
}

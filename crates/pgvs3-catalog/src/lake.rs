//! DuckLake on pgvs3: the SQL that attaches a lake whose catalog lives in pgvs3's own
//! PostgreSQL and whose data files live in one of its buckets, so one database holds both (one
//! backup, one point-in-time recovery, one set of replicas). `pgvs3 lake attach-string` prints
//! it; the operator writes it into a Bucket's Secret (`DUCKLAKE_ATTACH`). Pure.

use tokio_postgres::config::Host;

/// Where a DuckDB client finds the lake.
pub struct LakeTarget<'a> {
    /// How the database is reached, a libpq connection string ([`conninfo`], [`conninfo_of`]):
    /// the gateway's own settings, or (the operator) host, port, database and sslmode only, the
    /// client supplying user and password (libpq's `PGUSER`, `PGPASSWORD`).
    pub conninfo: &'a str,
    pub bucket: &'a str,
    /// Where in the bucket the lake's files go (`""`: the whole bucket; else ending in `/`).
    pub data_prefix: &'a str,
    pub access_key: &'a str,
    pub secret_key: &'a str,
    /// The gateway's S3 endpoint, e.g. `http://127.0.0.1:9000`.
    pub endpoint: &'a str,
    pub region: &'a str,
    /// The name the lake is attached as (see [`valid_alias`]).
    pub alias: &'a str,
    /// The PostgreSQL schema of the lake's catalog tables: one per lake, so that lakes in
    /// several buckets share the database ([`metadata_schema`]).
    pub metadata_schema: &'a str,
    /// Attach read-only (a reader on a standby, whose database refuses writes).
    pub read_only: bool,
}

/// The default schema of a bucket's lake catalog: `ducklake_` and the bucket's name, `-` and `.`
/// as `_` (a plain SQL name, as DuckLake writes it into its statements unquoted).
pub fn metadata_schema(bucket: &str) -> String {
    format!("ducklake_{}", bucket.replace(['-', '.'], "_"))
}

/// Whether `alias` can name the lake unquoted (it also names the files' secret, `<alias>_files`):
/// letters, digits and `_`.
pub fn valid_alias(alias: &str) -> bool {
    !alias.is_empty() && alias.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The statements a DuckDB session runs to use the lake: an S3 secret for the bucket's files
/// and the ATTACH of the DuckLake catalog (DuckDB's ducklake, postgres and httpfs extensions).
pub fn attach_sql(target: &LakeTarget<'_>) -> String {
    let (scheme, host) = match target.endpoint.split_once("://") {
        Some((scheme, host)) => (scheme, host.trim_end_matches('/')),
        None => ("http", target.endpoint.trim_end_matches('/')),
    };
    let use_ssl = scheme.eq_ignore_ascii_case("https");
    format!(
        "CREATE OR REPLACE SECRET {alias}_files (TYPE s3, KEY_ID {key}, SECRET {secret}, ENDPOINT {host}, \
         URL_STYLE 'path', USE_SSL {use_ssl}, REGION {region}, SCOPE {scope});\n\
         ATTACH {attach} AS {alias} ({read_only}DATA_PATH {data_path}, METADATA_SCHEMA {schema});\n",
        read_only = if target.read_only { "READ_ONLY, " } else { "" },
        alias = target.alias,
        key = literal(target.access_key),
        secret = literal(target.secret_key),
        host = literal(host),
        region = literal(target.region),
        scope = literal(&format!("s3://{}/", target.bucket)),
        attach = literal(&format!("ducklake:postgres:{}", target.conninfo)),
        data_path = literal(&format!("s3://{}/{}", target.bucket, target.data_prefix)),
        schema = literal(target.metadata_schema),
    )
}

/// A libpq connection string (`key=value` pairs, values quoted as libpq reads them) for the
/// settings given; those not set are left to libpq's environment variables.
pub fn conninfo(config: &tokio_postgres::Config) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(host) = config.get_hosts().first() {
        let host = match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        };
        pairs.push(("host", host));
    }
    if let Some(port) = config.get_ports().first() {
        pairs.push(("port", port.to_string()));
    }
    if let Some(dbname) = config.get_dbname() {
        pairs.push(("dbname", dbname.to_owned()));
    }
    if let Some(user) = config.get_user() {
        pairs.push(("user", user.to_owned()));
    }
    if let Some(password) = config.get_password() {
        pairs.push(("password", String::from_utf8_lossy(password).into_owned()));
    }
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(name, value)| (*name, value.as_str())).collect();
    conninfo_of(&pairs)
}

/// A libpq connection string of these `key=value` pairs.
pub fn conninfo_of(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", conninfo_value(value)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A conninfo value: bare when it is plain, else single-quoted with `\` and `'` escaped.
fn conninfo_value(value: &str) -> String {
    let plain = !value.is_empty() && value.bytes().all(|b| b.is_ascii_graphic() && b != b'\'' && b != b'\\');
    if plain {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attach_string_quotes_what_needs_quoting() {
        let mut config = tokio_postgres::Config::new();
        config
            .host("/run/pg socket")
            .port(5433)
            .dbname("pgvs3")
            .user("pgvs3")
            .password("it's a \\ secret");
        assert_eq!(
            conninfo(&config),
            r"host='/run/pg socket' port=5433 dbname=pgvs3 user=pgvs3 password='it\'s a \\ secret'"
        );
        let conninfo = conninfo(&config);
        let sql = attach_sql(&LakeTarget {
            conninfo: &conninfo,
            bucket: "lake",
            data_prefix: "",
            access_key: "AK",
            secret_key: "S'K",
            endpoint: "https://gw.example:9000/",
            region: "us-east-1",
            alias: "lake",
            metadata_schema: "ducklake_lake",
            read_only: true,
        });
        assert!(sql.contains("SECRET 'S''K'"), "{sql}");
        assert!(
            sql.contains("ENDPOINT 'gw.example:9000'") && sql.contains("USE_SSL true"),
            "{sql}"
        );
        assert!(sql.contains("password=''it\\''s a \\\\ secret''"), "{sql}");
        assert!(
            sql.contains("AS lake (READ_ONLY, DATA_PATH 's3://lake/', METADATA_SCHEMA 'ducklake_lake')"),
            "{sql}"
        );
        assert_eq!(metadata_schema("my-lake.v2"), "ducklake_my_lake_v2");
    }
}

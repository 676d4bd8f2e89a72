//! The gateways' connection to PostgreSQL: the Secret holding their libpq connection string.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::volumes::POSTGRES_CA_DIR;
use super::{Login, meta, pool_name};
use crate::crd::{GatewayPool, POSTGRES_CA_KEY};

/// `<pool>-pgvs3-database`: the Secret holding the gateways' connection string.
pub fn database_secret_name(pool: &GatewayPool) -> String {
    format!("{}-pgvs3-database", pool_name(pool))
}

/// The key of the connection string in [`database_secret_name`].
pub const DATABASE_URL_KEY: &str = "PGVS3_DATABASE_URL";

/// The gateways' libpq connection string, every value quoted and escaped as libpq's (and
/// tokio-postgres's) parser reads it: a password with `'`, `\` or a space is just a password.
/// Built here rather than by the kubelet's `$(VAR)` expansion, which pastes a value in verbatim.
pub fn database_url(pool: &GatewayPool, login: &Login) -> String {
    let postgres = &pool.spec.postgres;
    let port = postgres.port().to_string();
    let application = format!("pgvs3-{}", pool_name(pool));
    let root_cert = format!("{POSTGRES_CA_DIR}/{POSTGRES_CA_KEY}");
    let host = postgres.host(pool.spec.role);
    let mut pairs = vec![
        ("host", host.as_str()),
        ("port", port.as_str()),
        ("dbname", postgres.database()),
        ("user", login.user.as_str()),
        ("password", login.password.as_str()),
        ("application_name", application.as_str()),
        ("sslmode", postgres.ssl_mode().as_str()),
    ];
    if postgres.ca_secret().is_some() {
        pairs.push(("sslrootcert", root_cert.as_str()));
    }
    pgvs3_catalog::lake::conninfo_of(&pairs)
}

pub(super) fn database_secret(pool: &GatewayPool, login: &Login) -> Secret {
    Secret {
        metadata: meta(pool, database_secret_name(pool)),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            DATABASE_URL_KEY.to_string(),
            ByteString(database_url(pool, login).into_bytes()),
        )])),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{env_value, primary, secret_mounts, url_of};
    use super::super::{Inputs, build};
    use super::*;
    use crate::crd::PostgresSpec;

    #[test]
    fn any_login_survives_the_connection_string() {
        for (user, password) in [
            ("app", "plain"),
            ("app user", r"it's a \ pass'word"),
            ("o'hara", "' OR 1=1 --"),
            ("app", r"ends with \"),
            ("app", ""),
            ("app", "sslmode=disable host=evil"),
        ] {
            let login = Login {
                user: user.into(),
                password: password.into(),
            };
            let mut pool = primary();
            pool.spec.postgres = PostgresSpec {
                host: Some("pg.example".into()),
                secret_ref: Some("login".into()),
                ssl_mode: Some(crate::crd::SslMode::Require),
                ..PostgresSpec::default()
            };
            let url = database_url(&pool, &login);
            // The gateway's own parser (`--database-url`).
            let (config, _) = pgvs3_pgtls::parse(&url).unwrap_or_else(|err| panic!("{url}: {err:#}"));
            assert_eq!(config.get_user(), Some(user), "{url}");
            assert_eq!(config.get_password(), Some(password.as_bytes()), "{url}");
            assert_eq!(config.get_hosts().len(), 1, "{url}");
            assert!(url.ends_with(" sslmode=require"), "{url}");
        }
    }
    #[test]
    fn explicit_host_uses_its_secret_and_database() {
        let mut pool = primary();
        pool.spec.postgres = PostgresSpec {
            host: Some("pg.example".into()),
            port: Some(6432),
            database: Some("objects".into()),
            secret_ref: Some("pg-login".into()),
            ..PostgresSpec::default()
        };
        let objects = build(&pool, &Inputs::default());
        let url = url_of(&objects);
        assert!(url.starts_with("host=pg.example port=6432 dbname=objects "), "{url}");

        assert_eq!(
            env_value(&objects.deployment, "PGVS3_MASTER_KEY")
                .unwrap()
                .value_from
                .unwrap()
                .secret_key_ref
                .unwrap()
                .name,
            "p-pgvs3-master-key"
        );
    }
    #[test]
    fn cloudnativepg_is_verified_in_full_against_its_ca_and_a_host_as_asked() {
        let url = |pool: &GatewayPool| url_of(&build(pool, &Inputs::default()));
        let cluster = primary();
        assert!(
            url(&cluster).ends_with(&format!(" sslmode=verify-full sslrootcert={POSTGRES_CA_DIR}/ca.crt")),
            "{}",
            url(&cluster)
        );
        let mounts = secret_mounts(&build(&cluster, &Inputs::default()).deployment);
        assert_eq!(mounts["postgres-ca"], ("db-ca".into(), POSTGRES_CA_DIR.into(), true));

        let mut host = primary();
        host.spec.postgres = PostgresSpec {
            host: Some("pg.example".into()),
            secret_ref: Some("pg-login".into()),
            ..PostgresSpec::default()
        };
        assert!(url(&host).ends_with(" sslmode=prefer"), "{}", url(&host));
        assert!(secret_mounts(&build(&host, &Inputs::default()).deployment).is_empty());
        host.spec.postgres.ssl_mode = Some(crate::crd::SslMode::VerifyCa);
        host.spec.postgres.ca_secret_ref = Some("pg-ca".into());
        assert!(url(&host).ends_with(&format!(" sslmode=verify-ca sslrootcert={POSTGRES_CA_DIR}/ca.crt")));
        let mut plain = primary();
        plain.spec.postgres.ssl_mode = Some(crate::crd::SslMode::Disable);
        assert!(url(&plain).ends_with(" sslmode=disable"), "{}", url(&plain));
        assert!(secret_mounts(&build(&plain, &Inputs::default()).deployment).is_empty());
    }
}

//! Wire shapes of store instances.

use chrono::{DateTime, Utc};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use utoipa::{IntoParams, ToSchema};

use super::{category_name, StoreType};
use crate::crypto::{mask_secret, SecretBox};
use crate::{time, AppError, AppResult};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoreRow {
    pub id: i64,
    pub name: String,
    pub category: i16,
    pub store_type: i16,
    pub config: Value,
    pub password_enc: Option<String>,
    pub status: i16,
    pub is_default: bool,
    pub builtin: bool,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

impl StoreRow {
    pub fn store_type(&self) -> StoreType {
        StoreType::from_code(i64::from(self.store_type)).unwrap_or(StoreType::PgVector)
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoreView {
    pub id: i64,
    pub name: String,
    /// VECTOR_STORE or SEARCH_ENGINE.
    pub category: String,
    /// PGVECTOR, MILVUS, OPENSEARCH or PG_FULLTEXT.
    #[serde(rename = "type")]
    pub store_type: String,
    /// host, port, database, username, password (masked); empty for the service's own database,
    /// and for everyone but administrators (where a store lives is the operator's business).
    #[schema(value_type = StoreConfig)]
    pub config: Value,
    /// ACTIVE or INACTIVE.
    pub status: String,
    pub is_default: bool,
    /// The service's own PostgreSQL, which cannot be changed or deleted.
    pub builtin: bool,
    pub create_dt: String,
    pub update_dt: String,
}

impl StoreView {
    /// `connection`: whether the viewer is shown where and as whom the store is reached.
    pub fn new(row: StoreRow, secrets: &SecretBox, connection: bool) -> Self {
        let mut config = match connection {
            true => row.config.clone(),
            false => Value::Object(Default::default()),
        };
        if let (true, Some(obj), Some(sealed)) = (connection, config.as_object_mut(), &row.password_enc) {
            let masked = secrets
                .open(sealed)
                .map(|p| mask_secret(&p))
                .unwrap_or_else(|_| "****".to_owned());
            obj.insert("password".to_owned(), Value::String(masked));
        }
        Self {
            store_type: row.store_type().name().to_owned(),
            category: category_name(row.category).to_owned(),
            status: if row.status == 1 { "ACTIVE" } else { "INACTIVE" }.to_owned(),
            id: row.id,
            name: row.name,
            config,
            is_default: row.is_default,
            builtin: row.builtin,
            create_dt: time::datetime(row.create_dt),
            update_dt: time::datetime(row.update_dt),
        }
    }
}

/// Create (name, category, type and config required) or partial update.
#[derive(Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoreRequest {
    pub name: Option<String>,
    /// 1 = VECTOR_STORE, 2 = SEARCH_ENGINE.
    pub category: Option<i64>,
    /// 1 PGVECTOR, 2 MILVUS, 3 OPENSEARCH, 4 PG_FULLTEXT.
    #[serde(rename = "type")]
    pub store_type: Option<i64>,
    #[schema(value_type = Option<StoreConfig>)]
    pub config: Option<Value>,
    /// 1 = ACTIVE, 0 = INACTIVE.
    pub status: Option<i64>,
    pub is_default: Option<bool>,
}

#[derive(Deserialize, ToSchema)]
pub struct StoreTestRequest {
    /// Store type name: PGVECTOR, MILVUS, OPENSEARCH or PG_FULLTEXT.
    #[serde(rename = "type")]
    #[schema(required = true)]
    pub store_type: Option<String>,
    #[schema(value_type = Option<StoreConfig>, required = true)]
    pub config: Option<Value>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StoreFilter {
    /// 1 = vector store, 2 = search engine.
    pub category: Option<i64>,
    /// Substring of the name.
    pub keyword: Option<String>,
    /// Type name, e.g. PGVECTOR.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub store_type: Option<String>,
    /// ACTIVE or INACTIVE.
    pub status: Option<String>,
}

/// Connection settings read from a config object.
#[derive(Clone, Default)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    pub database: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub use_tls: bool,
    /// PEM certificates of the authorities a PostgreSQL server's certificate may come from
    /// (`caCert`), besides the public ones: a private CA's, such as Amazon RDS's.
    pub ca_cert: Option<String>,
}

/// The most `caCert` may hold: Amazon RDS's bundle of every region is about 150 KiB.
const MAX_CA_CERT_BYTES: usize = 512 * 1024;
/// A DNS name's longest form.
const MAX_HOST_CHARS: usize = 253;
/// A database or user name: PostgreSQL's are at most 63 bytes, other engines' not much longer.
const MAX_NAME_CHARS: usize = 255;
/// The most a config may hold besides `caCert`: it is stored and shown whole, whatever keys
/// it carries.
pub const MAX_CONFIG_BYTES: usize = 16 * 1024;

/// Whether `pem` is what a TLS handshake will take as its authorities: one certificate or more,
/// each one a trust anchor, and nothing else. Checked when saved: a bad one failed every
/// connection later, with the whole text as its error.
fn trust_anchors(pem: &str) -> bool {
    if pem.len() > MAX_CA_CERT_BYTES {
        return false;
    }
    let mut store = rustls::RootCertStore::empty();
    let mut certs = CertificateDer::pem_slice_iter(pem.as_bytes()).peekable();
    certs.peek().is_some() && certs.all(|cert| cert.is_ok_and(|c| store.add(c).is_ok()))
}

impl Connection {
    /// Reads host, port, database, username, password (and `tls`) from a config object.
    pub fn from_config(config: &Value, default_port: u16) -> AppResult<Connection> {
        let obj = config
            .as_object()
            .ok_or_else(|| AppError::validation("config must be a JSON object"))?;
        // A value of another type was read as absent: `"tls": "true"` connected without TLS.
        let text = |key: &str, max: usize| -> AppResult<Option<String>> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(v)) => {
                    let v = v.trim();
                    crate::validate::length(&format!("config.{key}"), v, 0, max)?;
                    Ok(Some(v.to_owned()).filter(|v| !v.is_empty()))
                }
                Some(_) => Err(AppError::validation(format!("config.{key} must be a string"))),
            }
        };
        let host = text("host", MAX_HOST_CHARS)?.ok_or_else(|| AppError::validation("config.host is required"))?;
        if host.contains('/') || host.contains(' ') {
            return Err(AppError::validation("config.host must be a host name or address"));
        }
        let port = match obj.get("port") {
            None | Some(Value::Null) => default_port,
            Some(p) => p
                .as_u64()
                .or_else(|| p.as_str().and_then(|s| s.parse().ok()))
                .filter(|p| (1..=65535).contains(p))
                .ok_or_else(|| AppError::validation("config.port must be a number from 1 to 65535"))?
                as u16,
        };
        // Its size is checked with the certificates it must hold, below.
        let ca_cert = text("caCert", usize::MAX)?;
        if ca_cert.as_deref().is_some_and(|pem| !trust_anchors(pem)) {
            return Err(AppError::validation(format!(
                "config.caCert must be PEM certificates (-----BEGIN CERTIFICATE-----) of at most {} KiB",
                MAX_CA_CERT_BYTES / 1024
            )));
        }
        let use_tls = match obj.get("tls") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(tls)) => *tls,
            Some(_) => return Err(AppError::validation("config.tls must be true or false")),
        };
        Ok(Connection {
            host,
            port,
            database: text("database", MAX_NAME_CHARS)?,
            username: text("username", MAX_NAME_CHARS)?,
            password: text("password", crate::validate::MAX_SECRET)?,
            use_tls,
            ca_cert,
        })
    }

    /// How to connect to it as a PostgreSQL server. With `tls` (or a `caCert`) only over TLS,
    /// to a server whose certificate names the host and comes from a public authority or the
    /// `caCert`: encrypted but unverified, a password would go to whoever answered on the way.
    /// Without, over TLS when the server offers it, unverified (libpq's default).
    pub fn pg_options(&self) -> PgConnectOptions {
        let mut opts = PgConnectOptions::new().host(&self.host).port(self.port);
        if let Some(d) = &self.database {
            opts = opts.database(d);
        }
        if let Some(u) = &self.username {
            opts = opts.username(u);
        }
        if let Some(p) = &self.password {
            opts = opts.password(p);
        }
        if self.use_tls || self.ca_cert.is_some() {
            opts = opts.ssl_mode(PgSslMode::VerifyFull);
        }
        if let Some(pem) = &self.ca_cert {
            opts = opts.ssl_root_cert_from_pem(pem.as_bytes().to_vec());
        }
        opts
    }

    /// Everything [`Self::pg_options`] connects with, as one key.
    pub fn pg_key(&self) -> String {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        format!(
            "{}\0{}\0{}\0{}\0{}\0{}\0{}",
            self.host,
            self.port,
            text(&self.database),
            text(&self.username),
            text(&self.password),
            self.use_tls,
            text(&self.ca_cert)
        )
    }
}

/// Where a store instance lives, for the API document (all keys optional on update).
#[derive(Serialize, ToSchema)]
pub struct StoreConfig {
    pub host: Option<String>,
    /// 1 to 65535; the type's usual port when left out.
    pub port: Option<u16>,
    pub database: Option<String>,
    pub username: Option<String>,
    /// Masked on read; sending the masked value back keeps the stored one.
    pub password: Option<String>,
    /// Connect with TLS (PostgreSQL: verified, see `caCert`).
    pub tls: Option<bool>,
    /// PostgreSQL only: PEM certificates of a private authority the server's certificate may
    /// come from (Amazon RDS's bundle, for one); implies `tls`.
    #[serde(rename = "caCert")]
    pub ca_cert: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed authority's certificate, as a private CA (Amazon RDS's, say) hands out.
    const PRIVATE_CA: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBizCCATGgAwIBAgIUGmOZ/hmqsP5hqnHwMOvLVScyPkswCgYIKoZIzj0EAwIw\n\
GjEYMBYGA1UEAwwPVGVzdCBwcml2YXRlIENBMCAXDTI2MTEyNzIyMDk0OVoYDzIx\n\
MjYxMTAzMjIwOTQ5WjAaMRgwFgYDVQQDDA9UZXN0IHByaXZhdGUgQ0EwWTATBgcq\n\
hkjOPQIBBggqhkjOPQMBBwNCAARzqxPUtNohxiVvyGWUP3Yt9VDlmyYzcnBgED1L\n\
6GpReH1xi5q8jTswnVLUL07TO7ZEyxHMm9zOoo7Ih2fLNR4+o1MwUTAdBgNVHQ4E\n\
FgQUYbuu+qexQ3wCwbFecIhGDPRXfY8wHwYDVR0jBBgwFoAUYbuu+qexQ3wCwbFe\n\
cIhGDPRXfY8wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEA8RqP\n\
qM78UQ/VC7GUy5DCYYDLu/zKP2AlNBEwonuFLQ8CIFHQ9icsKHDzgi1q35CDq/vm\n\
s79AgO6ZDTp/tD4Fg42R\n\
-----END CERTIFICATE-----\n";

    fn with_ca(ca: &str) -> AppResult<Connection> {
        Connection::from_config(&serde_json::json!({ "host": "db.internal", "caCert": ca }), 5432)
    }

    #[test]
    fn a_ca_cert_is_taken_only_as_certificates_a_handshake_will_trust() {
        let conn = with_ca(PRIVATE_CA).expect("a certificate");
        assert_eq!(conn.ca_cert.as_deref(), Some(PRIVATE_CA.trim()));
        assert!(with_ca(&format!("{PRIVATE_CA}{PRIVATE_CA}")).is_ok(), "a bundle");
        let broken = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
        let not_der = "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN PRIVATE KEY-----\naGVsbG8=\n-----END PRIVATE KEY-----\n";
        for bad in [
            "not a certificate",
            broken,
            not_der,
            key,
            &format!("{PRIVATE_CA}{broken}"),
        ] {
            let refused = with_ca(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                refused.contains("config.caCert must be PEM certificates"),
                "{bad}: {refused}"
            );
        }
        let huge = PRIVATE_CA.repeat(MAX_CA_CERT_BYTES / PRIVATE_CA.len() + 1);
        assert!(with_ca(&huge).is_err());
    }
}

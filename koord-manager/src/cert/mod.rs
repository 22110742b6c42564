//! Webhook serving certificates: self-managed (a CA and a serving
//! certificate generated here, kept in a Secret or a directory, the CA bundle
//! written into the webhook configurations, rotated before expiry) or
//! provided (files mounted by cert-manager or an operator, reloaded on change).

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use koord_common::sync::RwLockExt;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

pub mod configuration;
pub mod controller;
pub mod writer;

/// The field manager of the manager's writes to the webhook configurations and the
/// certificate Secret, so `managedFields` names who owns the CA bundle.
pub const FIELD_MANAGER: &str = "koord-manager";

fn write_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// Secret/file names, as upstream's cert writer uses them.
pub const CA_KEY_NAME: &str = "ca-key.pem";
pub const CA_CERT_NAME: &str = "ca-cert.pem";
pub const SERVER_KEY_NAME: &str = "key.pem";
pub const SERVER_KEY_NAME_2: &str = "tls.key";
pub const SERVER_CERT_NAME: &str = "cert.pem";
pub const SERVER_CERT_NAME_2: &str = "tls.crt";

/// Common name of the generated CA (upstream's).
pub const CA_COMMON_NAME: &str = "webhook-cert-ca";
/// Lifetime of generated certificates (upstream: ten years).
pub const CERT_LIFETIME: Duration = Duration::from_secs(3650 * 24 * 3600);
/// A serving certificate is replaced when it would not verify this far ahead (upstream: 6 months).
pub const SERVING_CERT_RENEW_AHEAD: Duration = Duration::from_secs(183 * 24 * 3600);
/// A CA is reused for a new serving certificate only if valid this far ahead (upstream: 1 year).
pub const CA_REUSE_AHEAD: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("invalid PEM in {what}: {reason}")]
    Pem { what: &'static str, reason: String },
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(#[from] rustls::Error),
    #[error("DNS name {0:?} is empty")]
    EmptyDnsName(String),
}

/// PEM-encoded CA and serving certificate with their keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Artifacts {
    pub ca_key: String,
    pub ca_cert: String,
    pub cert: String,
    pub key: String,
}

/// `<service>.<namespace>.svc`, the name kube-apiserver dials.
pub fn service_dns_name(namespace: &str, service: &str) -> String {
    format!("{service}.{namespace}.svc")
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Year, month, day of a Unix day number (proleptic Gregorian).
fn civil_from_days(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

fn ymd(time: SystemTime) -> (i32, u8, u8) {
    let days = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| (d.as_secs() / 86_400) as i64);
    civil_from_days(days)
}

/// Valid from yesterday (clock skew) for [`CERT_LIFETIME`].
fn set_validity(params: &mut CertificateParams, now: SystemTime) {
    let (year, month, day) = ymd(now - Duration::from_secs(86_400));
    params.not_before = rcgen::date_time_ymd(year, month, day);
    let (year, month, day) = ymd(now + CERT_LIFETIME);
    params.not_after = rcgen::date_time_ymd(year, month, day);
}

fn ca_params(now: SystemTime) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, now);
    Ok(params)
}

fn serving_params(dns_name: &str, now: SystemTime) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, dns_name);
    params.distinguished_name = name;
    let mut sans = vec![SanType::DnsName("localhost".try_into()?)];
    match dns_name.parse::<std::net::IpAddr>() {
        Ok(ip) => sans.push(SanType::IpAddress(ip)),
        Err(_) => sans.push(SanType::DnsName(dns_name.try_into()?)),
    }
    params.subject_alt_names = sans;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, now);
    Ok(params)
}

/// Generates a serving certificate for `dns_name` (plus `localhost`),
/// signed by `existing_ca` when that CA is still good for a year, otherwise
/// by a new CA. Keys are ECDSA P-256.
pub fn generate(
    dns_name: &str,
    existing_ca: Option<(&str, &str)>,
    now: SystemTime,
) -> Result<Artifacts, CertError> {
    if dns_name.trim().is_empty() {
        return Err(CertError::EmptyDnsName(dns_name.to_owned()));
    }
    if let Some((ca_key, ca_cert)) = existing_ca
        && let Ok(artifacts) = sign_with(dns_name, ca_key, ca_cert, now)
        && is_valid_for(&artifacts, dns_name, now + CA_REUSE_AHEAD)
    {
        return Ok(artifacts);
    }
    let ca_key = KeyPair::generate()?;
    let ca_params = ca_params(now)?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, &ca_key);
    let key = KeyPair::generate()?;
    let cert = serving_params(dns_name, now)?.signed_by(&key, &issuer)?;
    Ok(Artifacts {
        ca_key: ca_key.serialize_pem(),
        ca_cert: ca_cert.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Signs a new serving certificate with a stored CA. The CA's subject is
/// rebuilt from our fixed parameters, so a CA we did not generate fails the
/// validity check afterwards and gets replaced.
fn sign_with(
    dns_name: &str,
    ca_key: &str,
    ca_cert: &str,
    now: SystemTime,
) -> Result<Artifacts, CertError> {
    let key_pair = KeyPair::from_pem(ca_key)?;
    let issuer = Issuer::new(ca_params(now)?, &key_pair);
    let key = KeyPair::generate()?;
    let cert = serving_params(dns_name, now)?.signed_by(&key, &issuer)?;
    Ok(Artifacts {
        ca_key: ca_key.to_owned(),
        ca_cert: ca_cert.to_owned(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn certificates(pem: &str, what: &'static str) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem.as_bytes()).collect();
    let certs = certs.map_err(|err| CertError::Pem {
        what,
        reason: err.to_string(),
    })?;
    if certs.is_empty() {
        return Err(CertError::Pem {
            what,
            reason: "no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

/// The serving certificate and key, ready for rustls (checks they match).
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, CertError> {
    let chain = certificates(cert_pem, "serving certificate")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|err| CertError::Pem {
        what: "serving key",
        reason: err.to_string(),
    })?;
    Ok(CertifiedKey::from_der(chain, key, &provider())?)
}

/// Whether the serving certificate pairs with its key and verifies against
/// the CA for `dns_name` at time `at` (upstream checks six months ahead).
pub fn is_valid_for(artifacts: &Artifacts, dns_name: &str, at: SystemTime) -> bool {
    verify(artifacts, dns_name, at).is_ok()
}

fn verify(artifacts: &Artifacts, dns_name: &str, at: SystemTime) -> Result<(), String> {
    let key = certified_key(&artifacts.cert, &artifacts.key).map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates(&artifacts.ca_cert, "CA certificate").map_err(|e| e.to_string())? {
        roots.add(ca).map_err(|e| e.to_string())?;
    }
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(dns_name.to_owned()).map_err(|e| e.to_string())?;
    let since_epoch = at.duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
    // webpki does not check a trust anchor's own validity period; Go's x509 does.
    for ca in certificates(&artifacts.ca_cert, "CA certificate").map_err(|e| e.to_string())? {
        match certificate_validity(&ca) {
            Some((not_before, not_after)) if not_before <= at && at <= not_after => {}
            Some(_) => return Err("the CA certificate is not valid at that time".into()),
            None => return Err("cannot read the CA certificate's validity".into()),
        }
    }
    let (end_entity, intermediates) = key.cert.split_first().ok_or("empty chain")?;
    verifier
        .verify_server_cert(
            end_entity,
            intermediates,
            &name,
            &[],
            UnixTime::since_unix_epoch(since_epoch),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// One DER element: (tag, content, rest).
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (length, &rest[count..])
    };
    if rest.len() < length {
        return None;
    }
    Some((tag, &rest[..length], &rest[length..]))
}

/// A UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn der_time(tag: u8, content: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(content).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if text.len() == 12 => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        0x18 if text.len() == 14 => (text.get(..4)?.parse().ok()?, &text[4..]),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(seconds)
        .ok()
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

/// Unix day number of a Gregorian date (inverse of [`civil_from_days`]).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `(notBefore, notAfter)` of a DER certificate.
pub fn certificate_validity(der: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let (_, certificate, _) = der_element(der)?;
    let (_, tbs, _) = der_element(certificate)?;
    let mut rest = tbs;
    let (tag, _, after) = der_element(rest)?;
    if tag == 0xa0 {
        rest = after; // explicit version
    }
    for _ in 0..3 {
        // serialNumber, signature, issuer
        rest = der_element(rest)?.2;
    }
    let (_, validity, _) = der_element(rest)?;
    let (before_tag, before, rest) = der_element(validity)?;
    let (after_tag, after, _) = der_element(rest)?;
    Some((der_time(before_tag, before)?, der_time(after_tag, after)?))
}

/// The serving certificate the TLS listener presents; swapped in place on rotation.
#[derive(Debug, Clone)]
pub struct ReloadableCert {
    current: Arc<RwLock<Option<Arc<CertifiedKey>>>>,
}

impl Default for ReloadableCert {
    fn default() -> Self {
        ReloadableCert {
            current: Arc::new(RwLock::new(None)),
        }
    }
}

impl ReloadableCert {
    pub fn set(&self, key: CertifiedKey) {
        *self.current.write_or_recover() = Some(Arc::new(key));
    }

    pub fn set_pem(&self, cert_pem: &str, key_pem: &str) -> Result<(), CertError> {
        self.set(certified_key(cert_pem, key_pem)?);
        Ok(())
    }

    pub fn is_loaded(&self) -> bool {
        self.current.read_or_recover().is_some()
    }

    /// The DER of the certificate presented now, if any.
    pub fn current_der(&self) -> Option<Vec<u8>> {
        let current = self.current.read_or_recover();
        current
            .as_ref()
            .and_then(|k| k.cert.first().map(|c| c.to_vec()))
    }

    /// A rustls server configuration that presents whatever is current.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, CertError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(self.clone()));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read_or_recover().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DNS: &str = "koordinator-webhook-service.koordinator-system.svc";

    #[test]
    fn validity_is_read_from_the_certificate() {
        let now = SystemTime::now();
        let artifacts = generate(DNS, None, now).unwrap();
        let ca = certificates(&artifacts.ca_cert, "ca").unwrap();
        let (not_before, not_after) = certificate_validity(&ca[0]).unwrap();
        assert!(not_before <= now && now - Duration::from_secs(2 * 86_400) <= not_before);
        let lifetime = not_after.duration_since(not_before).unwrap();
        let expected = CERT_LIFETIME + Duration::from_secs(86_400);
        assert!(
            lifetime.abs_diff(expected) <= Duration::from_secs(2 * 86_400),
            "{lifetime:?}"
        );
        assert_eq!(days_from_civil(2024, 1, 1), 19_723);
        assert!(certificate_validity(b"\x30\x03garbage").is_none());
    }

    #[test]
    fn civil_dates_are_right() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }

    #[test]
    fn generated_cert_verifies_for_the_service_name_only() {
        let now = SystemTime::now();
        let artifacts = generate(DNS, None, now).unwrap();
        assert!(is_valid_for(
            &artifacts,
            DNS,
            now + SERVING_CERT_RENEW_AHEAD
        ));
        assert!(is_valid_for(&artifacts, "localhost", now));
        assert!(!is_valid_for(&artifacts, "other.svc", now));
        assert!(
            !is_valid_for(
                &artifacts,
                DNS,
                now + CERT_LIFETIME + Duration::from_secs(2 * 86_400)
            ),
            "expired certificates fail"
        );
    }

    #[test]
    fn a_good_ca_is_reused_and_a_foreign_one_replaced() {
        let now = SystemTime::now();
        let first = generate(DNS, None, now).unwrap();
        let second = generate(DNS, Some((&first.ca_key, &first.ca_cert)), now).unwrap();
        assert_eq!(second.ca_cert, first.ca_cert);
        assert_ne!(second.cert, first.cert);
        assert!(is_valid_for(&second, DNS, now));

        let other = generate(DNS, None, now).unwrap();
        let mixed = generate(DNS, Some((&first.ca_key, &other.ca_cert)), now).unwrap();
        assert_ne!(
            mixed.ca_cert, other.ca_cert,
            "a CA whose key does not match is replaced"
        );
        assert!(is_valid_for(&mixed, DNS, now));
    }

    #[test]
    fn mismatched_key_and_garbage_are_invalid() {
        let now = SystemTime::now();
        let a = generate(DNS, None, now).unwrap();
        let b = generate(DNS, None, now).unwrap();
        let swapped = Artifacts {
            key: b.key.clone(),
            ..a.clone()
        };
        assert!(!is_valid_for(&swapped, DNS, now));
        let garbage = Artifacts {
            cert: "nope".into(),
            ..a
        };
        assert!(!is_valid_for(&garbage, DNS, now));
        assert!(generate(" ", None, now).is_err());
    }
}

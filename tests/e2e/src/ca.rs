//! The suite's test CA and the HTTPS host's leaf certificate.
//!
//! `boxmaker-e2e ca --out DIR` writes `ca.pem` (appended to the test image's CA bundle) and
//! `ca-key.pem`. `serve` reads the key back, rebuilds the same CA (same name, same key, so the
//! same subject key identifier) and signs a fresh leaf for the test names with it.

use std::path::Path;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

pub const CA_CERT: &str = "ca.pem";
pub const CA_KEY: &str = "ca-key.pem";

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
}

pub struct Ca {
    pub cert: Certificate,
    pub key: KeyPair,
}

fn ca_params() -> Result<CertificateParams, CaError> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(DnType::CommonName, "boxmaker e2e test CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(p)
}

/// A new CA, written to `dir`.
pub fn create(dir: &Path) -> Result<(), CaError> {
    let key = KeyPair::generate()?;
    let cert = ca_params()?.self_signed(&key)?;
    std::fs::create_dir_all(dir).map_err(|e| CaError::Io(dir.display().to_string(), e))?;
    for (name, text) in [(CA_CERT, cert.pem()), (CA_KEY, key.serialize_pem())] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| CaError::Io(path.display().to_string(), e))?;
    }
    Ok(())
}

/// The CA written by [`create`].
pub fn load(dir: &Path) -> Result<Ca, CaError> {
    let path = dir.join(CA_KEY);
    let pem =
        std::fs::read_to_string(&path).map_err(|e| CaError::Io(path.display().to_string(), e))?;
    let key = KeyPair::from_pem(&pem)?;
    let cert = ca_params()?.self_signed(&key)?;
    Ok(Ca { cert, key })
}

/// A leaf for `names`, signed by `ca`: (certificate DER, PKCS#8 key DER).
pub fn leaf(ca: &Ca, names: &[String]) -> Result<(Vec<u8>, Vec<u8>), CaError> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(names.to_vec())?;
    p.distinguished_name
        .push(DnType::CommonName, "boxmaker e2e test host");
    let cert = p.signed_by(&key, &ca.cert, &ca.key)?;
    Ok((cert.der().to_vec(), key.serialize_der()))
}

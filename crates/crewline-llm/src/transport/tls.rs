//! TLS for the model clients: rustls with the process's crypto provider and the platform's
//! verifier, plus the extra CA certificates a team trusts (`SSL_CERT_FILE`,
//! [`TlsRoots::add_pem`]).

use std::{ffi::OsString, sync::Arc};

use rustls::pki_types::{CertificateDer, pem::PemObject};

use crate::LlmError;

/// CA certificates trusted beside the platform's roots: a company's TLS-inspecting proxy, a
/// self-hosted model behind a private CA.
///
/// Both model clients take them:
/// [`OpenAiClientBuilder::add_root_certificate`](crate::OpenAiClientBuilder::add_root_certificate)
/// and, with the `async-openai` feature, `TlsRoots::reqwest_client` (for async-openai).
///
/// ```
/// let roots = crewline_llm::TlsRoots::new();
/// assert!(roots.is_empty());
/// let refused = roots.add_pem(b"not a certificate");
/// assert!(matches!(refused, Err(crewline_llm::LlmError::Config(_))));
/// ```
#[derive(Debug, Clone, Default)]
pub struct TlsRoots {
    certs: Vec<CertificateDer<'static>>,
}

impl TlsRoots {
    /// No extra roots (the platform's alone).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds every certificate of `pem` (one or more `-----BEGIN CERTIFICATE-----` blocks);
    /// a `pem` with none is a [`LlmError::Config`].
    pub fn add_pem(mut self, pem: impl AsRef<[u8]>) -> Result<Self, LlmError> {
        let added = parse_pem(pem.as_ref())?;
        self.certs.extend(added);
        Ok(self)
    }

    /// Whether no extra root was given.
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    /// The roots with those of the file `SSL_CERT_FILE` names, when `var` says it is set.
    ///
    /// On Linux the platform verifier already reads that file instead of the system's
    /// bundle; reading it here too makes it trusted on every platform, as curl and OpenSSL
    /// users expect.
    pub(crate) fn with_env(
        mut self,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, LlmError> {
        let Some(path) = var("SSL_CERT_FILE").filter(|p| !p.is_empty()) else {
            return Ok(self);
        };
        let pem = std::fs::read(&path).map_err(|e| {
            LlmError::config(format!(
                "SSL_CERT_FILE {:?} could not be read: {e}",
                path.to_string_lossy()
            ))
        })?;
        let added = parse_pem(&pem).map_err(|e| {
            LlmError::config(format!("SSL_CERT_FILE {:?}: {e}", path.to_string_lossy()))
        })?;
        self.certs.extend(added);
        Ok(self)
    }

    /// A reqwest client with the default client's TLS: the platform's verifier with these
    /// roots and those of `SSL_CERT_FILE`, HTTP/1.1; the client to give
    /// [`AsyncOpenAiClient::bounded_client`](crate::AsyncOpenAiClient::bounded_client), as
    /// async-openai sends through reqwest alone. reqwest reads the proxy variables itself.
    #[cfg(feature = "async-openai")]
    pub fn reqwest_client(&self) -> Result<reqwest::Client, LlmError> {
        let roots = self.clone().with_env(|name| std::env::var_os(name))?;
        let mut tls = client_config(&roots)
            .map_err(|e| LlmError::config_caused_by("could not set up TLS", e))?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| LlmError::config_caused_by("could not set up the HTTP client", e))
    }

    /// The certificates.
    pub(crate) fn certs(&self) -> &[CertificateDer<'static>] {
        &self.certs
    }
}

/// Every certificate of `pem`; none is an error.
fn parse_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, LlmError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LlmError::config_caused_by("a root certificate's PEM is unreadable", e))?;
    if certs.is_empty() {
        return Err(LlmError::config(
            "no certificate in the PEM given as a root".to_owned(),
        ));
    }
    Ok(certs)
}

/// The rustls settings of a model client: the process's crypto provider (else aws-lc-rs),
/// safe protocol versions, and the platform's verifier with `roots` added. No ALPN: the
/// connector that uses it offers the HTTP versions it speaks.
pub(crate) fn client_config(roots: &TlsRoots) -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let verifier = if roots.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())?
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(
            roots.certs().iter().cloned(),
            provider.clone(),
        )?
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ssl_cert_file_is_a_config_error_or_nothing() {
        let none = TlsRoots::new().with_env(|_| None).expect("no variable");
        assert!(none.is_empty());
        let empty = TlsRoots::new()
            .with_env(|_| Some(OsString::new()))
            .expect("an empty variable is unset");
        assert!(empty.is_empty());
        let missing = TlsRoots::new()
            .with_env(|_| Some("/nonexistent/ca.pem".into()))
            .expect_err("no such file");
        assert!(
            matches!(&missing, LlmError::Config(m)
                if m.contains("SSL_CERT_FILE") && m.contains("/nonexistent/ca.pem")),
            "{missing:?}"
        );
    }
}

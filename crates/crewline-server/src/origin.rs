//! Which web pages may open calls, and which names a loopback server without a token answers
//! to (issue 30: any page open in a developer's browser could drive a local crew's calls,
//! tools and model spend).
//!
//! A platform is not a browser and sends no `Origin`: it is let through. A browser sends the
//! page's origin, which must be the crew's own (the request's `Host`), a page on this machine
//! (`localhost`, `127.x.y.z`, `[::1]`: the playground and its browser tests), or one allowed
//! with [`CrewServer::allow_origin`](crate::CrewServer::allow_origin). A page on a name rebound
//! to 127.0.0.1 (DNS rebinding) is same-origin by the first rule; a loopback server without a
//! credential therefore also refuses every request whose `Host` is not a loopback name.

use axum::{
    extract::Request,
    http::{HeaderMap, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// The browser origins allowed to open calls beyond the crew's own and this machine's pages.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    allowed: Vec<String>,
    any: bool,
}

impl Origins {
    /// Allows `origin` (`scheme://host[:port]`), or every origin for `*`.
    pub(crate) fn allow(&mut self, origin: &str) {
        let origin = normalize(origin);
        if origin == "*" {
            self.any = true;
        } else {
            self.allowed.push(origin);
        }
    }

    /// Whether a `/ws` request with `headers` may be upgraded.
    pub(crate) fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            // Not a browser.
            return true;
        };
        if self.any {
            return true;
        }
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let origin = normalize(origin);
        // `null` (a sandboxed frame, a file) and anything else without a host is refused.
        let Some((scheme, authority)) = origin.split_once("://") else {
            return false;
        };
        if !matches!(scheme, "http" | "https") || authority.is_empty() {
            return false;
        }
        crewline_auth::is_loopback_host(authority)
            || host(headers).is_some_and(|host| host.eq_ignore_ascii_case(authority))
            || self.allowed.contains(&origin)
    }
}

/// An origin as compared: trimmed, lower-case, without a trailing `/`.
fn normalize(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

fn host(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::HOST)?.to_str().ok()
}

/// Refuses, with 403, a request whose `Host` is not a loopback name: the layer of a server on
/// loopback without a credential. A request without `Host` (HTTP/1.0) is let through: no
/// browser sends such.
pub(crate) async fn loopback_host(request: Request, next: Next) -> Response {
    let allowed = match request.headers().get(header::HOST) {
        None => request
            .uri()
            .authority()
            .is_none_or(|authority| crewline_auth::is_loopback_host(authority.as_str())),
        Some(value) => value.to_str().is_ok_and(crewline_auth::is_loopback_host),
    };
    if allowed {
        return next.run(request).await;
    }
    tracing::debug!("refused a request for a non-loopback host name");
    (
        StatusCode::FORBIDDEN,
        axum::Json(serde_json::json!({
            "detail": "this server is on loopback without a token: it answers loopback \
                       names only (127.0.0.1, localhost, [::1])"
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(origin: Option<&str>, host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        headers
    }

    #[test]
    fn platforms_this_machine_and_the_crew_itself_pass_other_pages_do_not() {
        let mut origins = Origins::default();
        origins.allow("https://Console.Example.com/");
        let host = "crew.example.net:8080";
        for ok in [
            None,
            Some("http://127.0.0.1:7000"),
            Some("http://localhost:5173"),
            Some("http://[::1]:7000"),
            Some("https://crew.example.net:8080"),
            Some("https://console.example.com"),
        ] {
            assert!(origins.admits(&headers(ok, host)), "{ok:?}");
        }
        for refused in [
            "http://attacker.example",
            "null",
            "http://localhost.attacker.example",
            "https://console.example.com.attacker.example",
            "file://",
            "chrome-extension://abc",
        ] {
            assert!(!origins.admits(&headers(Some(refused), host)), "{refused}");
        }
        origins.allow("*");
        assert!(origins.admits(&headers(Some("http://attacker.example"), host)));
    }
}

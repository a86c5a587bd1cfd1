//! Where the Redis primary is: one fixed address, or the one Redis Sentinel names (asked at
//! connect and again after a failover). Shared by the commands' connection and the wake-up
//! subscription, so both follow the same primary.

use std::{sync::Arc, time::Duration};

use redis::{
    ConnectionAddr,
    sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType},
};

/// How long connecting to Redis (or asking Sentinel for it) may take before the attempt fails.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The URL scheme of a Redis found through Sentinel.
const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// Sentinel's port when the URL names none.
const SENTINEL_PORT: u16 = 26379;

/// Where the Redis primary is: one address, or the one Sentinel names.
#[derive(Clone)]
pub(crate) enum Primary {
    /// A fixed address (`redis://`, `rediss://`, `redis+unix://`).
    Fixed(redis::Client),
    /// `redis+sentinel://`: asked of Sentinel at connect and after a failover.
    Sentinel(Arc<SentinelState>),
}

/// The Sentinel client, and the primary it named last.
pub(crate) struct SentinelState {
    client: tokio::sync::Mutex<SentinelClient>,
    /// The address Sentinel named last (by anyone: the wake-up subscription asks too, when it
    /// is lost, so the commands learn of a failover before their next command fails).
    named: std::sync::Mutex<String>,
}

impl Primary {
    /// The primary `url` names (its form checked; nothing is connected yet).
    pub(crate) fn from_url(url: &str) -> redis::RedisResult<Self> {
        match url.strip_prefix(SENTINEL_SCHEME) {
            Some(rest) => Ok(Self::Sentinel(Arc::new(SentinelState {
                client: tokio::sync::Mutex::new(sentinel_client(rest)?),
                named: std::sync::Mutex::new(String::new()),
            }))),
            None => Ok(Self::Fixed(redis::Client::open(url)?)),
        }
    }

    pub(crate) fn is_sentinel(&self) -> bool {
        matches!(self, Self::Sentinel(_))
    }

    /// The address Sentinel named last (`None` without Sentinel).
    pub(crate) fn named(&self) -> Option<String> {
        match self {
            Self::Fixed(_) => None,
            Self::Sentinel(sentinel) => sentinel.named.lock().ok().map(|named| named.clone()),
        }
    }

    /// A client for the primary now (Sentinel is asked, within the connect timeout).
    pub(crate) async fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Self::Fixed(client) => Ok(client.clone()),
            Self::Sentinel(sentinel) => {
                let asking = async { sentinel.client.lock().await.async_get_client().await };
                let client = match tokio::time::timeout(CONNECT_TIMEOUT, asking).await {
                    Ok(client) => client?,
                    Err(_) => {
                        return Err(redis::RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "asking Sentinel for the primary timed out",
                        )));
                    }
                };
                if let Ok(mut named) = sentinel.named.lock() {
                    *named = client.get_connection_info().addr().to_string();
                }
                Ok(client)
            }
        }
    }
}

/// A Sentinel client for `[user[:password]@]host[:port][,host[:port]...]/service[/db]` (the
/// URL after `redis+sentinel://`); the credentials and database are the Redis nodes'.
fn sentinel_client(rest: &str) -> redis::RedisResult<SentinelClient> {
    let invalid =
        |why: &'static str| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, why));
    let (authority, path) = rest
        .split_once('/')
        .ok_or_else(|| invalid("redis+sentinel:// needs /<service name> after the hosts"))?;
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (Some(credentials), hosts),
        None => (None, authority),
    };
    let mut sentinels = Vec::new();
    for host in hosts.split(',').filter(|host| !host.is_empty()) {
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) => (
                name,
                port.parse()
                    .map_err(|_| invalid("a Sentinel port is not a number"))?,
            ),
            None => (host, SENTINEL_PORT),
        };
        sentinels.push(ConnectionAddr::Tcp(name.to_owned(), port));
    }
    if sentinels.is_empty() {
        return Err(invalid("redis+sentinel:// names no Sentinel"));
    }
    let mut parts = path.split('/');
    let service = parts
        .next()
        .filter(|service| !service.is_empty())
        .ok_or_else(|| invalid("redis+sentinel:// needs /<service name> after the hosts"))?;
    let mut builder = SentinelClientBuilder::new(sentinels, service, SentinelServerType::Master)?;
    if let Some(db) = parts.next().filter(|db| !db.is_empty()) {
        builder = builder.set_client_to_redis_db(
            db.parse()
                .map_err(|_| invalid("the database after the service is not a number"))?,
        );
    }
    if let Some(credentials) = credentials {
        let (user, password) = match credentials.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (credentials, None),
        };
        if !user.is_empty() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = password.filter(|password| !password.is_empty()) {
            builder = builder.set_client_to_redis_password(password);
        }
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_its_sentinels_the_service_and_the_nodes_credentials() {
        for url in [
            "redis+sentinel://127.0.0.1:26379/mymaster",
            "redis+sentinel://a:26379,b:26380,c/mymaster",
            "redis+sentinel://:secret@a:26379,b:26380/mymaster/2",
            "redis+sentinel://user:secret@a/mymaster",
        ] {
            let primary = Primary::from_url(url);
            assert!(
                matches!(primary, Ok(Primary::Sentinel(_))),
                "{url}: {:?}",
                primary.err()
            );
        }
        for url in [
            "redis+sentinel://a:26379",
            "redis+sentinel://a:26379/",
            "redis+sentinel:///mymaster",
            "redis+sentinel://a:port/mymaster",
            "redis+sentinel://a/mymaster/db",
        ] {
            assert!(Primary::from_url(url).is_err(), "{url} was accepted");
        }
        assert!(matches!(
            Primary::from_url("redis://127.0.0.1:6379"),
            Ok(Primary::Fixed(_))
        ));
    }

    #[test]
    fn a_sentinel_urls_password_is_hidden_like_any_other() {
        assert_eq!(
            crate::redact("redis+sentinel://user:secret@a:26379,b:26380/mymaster"),
            "redis+sentinel://user:***@a:26379,b:26380/mymaster"
        );
        let refused = Primary::from_url("redis+sentinel://:secret@a:port/mymaster")
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(!refused.contains("secret"), "{refused}");
    }
}

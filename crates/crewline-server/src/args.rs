//! [`ServeArgs`]: the command-line options every crewline server binary shares (feature `clap`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::CrewServer;

/// `--host`, `--token` (or `CREWLINE_AUTH_TOKEN`), `--allow-unauthenticated` and `--allow-origin`, to flatten
/// into a binary's own `clap` options beside its `--port`.
///
/// ```
/// # use clap::Parser;
/// #[derive(clap::Parser)]
/// struct Options {
///     #[command(flatten)]
///     serve: crewline_server::ServeArgs,
///     /// The port.
///     #[arg(long, default_value_t = 8080)]
///     port: u16,
/// }
/// let options = Options::parse_from(["serve", "--host", "0.0.0.0", "--token", "s3cret"]);
/// assert_eq!(options.serve.addr(options.port).to_string(), "0.0.0.0:8080");
/// ```
#[derive(Clone, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on; beyond loopback the server refuses to start without --token
    /// (or --allow-unauthenticated).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// The shared secret every request must carry, as `Authorization: Bearer <token>` (or
    /// `?token=` on /ws).
    #[arg(long, env = crewline_auth::TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// Serve without a token even beyond loopback: for a trusted network only.
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Also let web pages of this origin (e.g. https://console.example.com, `*` for any) open
    /// calls from a browser; the crew's own origin and pages on this machine always may.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("host", &self.host)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .field("allow_origins", &self.allow_origins)
            .finish()
    }
}

impl ServeArgs {
    /// The address to bind: `--host` and `port`.
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.host, port)
    }

    /// `server` bound to `--host` and `port`, with the token and the opt-out applied (the
    /// server's start-up checks then refuse an empty token or an open address without one).
    pub fn apply(&self, server: CrewServer, port: u16) -> CrewServer {
        let mut server = server.bind(self.addr(port));
        if let Some(token) = &self.token {
            server = server.auth_token(token);
        }
        if self.allow_unauthenticated {
            server = server.allow_unauthenticated();
        }
        for origin in &self.allow_origins {
            server = server.allow_origin(origin);
        }
        server
    }
}

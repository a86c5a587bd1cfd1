//! `crewline playground`: serves the crew playground page (`crewline-playground`) on
//! loopback for the crew at `--url`, and prints the page's address; it opens nothing. The page
//! itself talks to the crew, from the browser.
//!
//! `crewline demo --playground` serves the demo crew and this page together
//! ([`crate::demo`]).

use std::{io, io::Write, net::SocketAddr};

use crewline_playground::{DEFAULT_PORT, Playground, PlaygroundError};

/// `crewline playground`'s command line.
#[derive(Debug, clap::Args)]
pub struct PlaygroundArgs {
    /// The crew's WebSocket address, the page's default (it can connect elsewhere).
    #[arg(long, default_value = "ws://127.0.0.1:8080/ws")]
    pub url: String,
    /// The crew's token: the page sends it as `?token=` (it reads it from /config.json, so it
    /// is in no page URL); default `CREWLINE_AUTH_TOKEN`, as `demo` and `chat`.
    #[arg(long, env = crewline_server::TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// The page's port on 127.0.0.1 (0: a free port). `--port` is always a crew's port and
    /// `--playground-port` the page's, here as in `demo --playground`; the old `--port` of
    /// this command is still read (hidden).
    #[arg(long, alias = "port", default_value_t = DEFAULT_PORT)]
    pub playground_port: u16,
}

/// Why the playground command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaygroundCliError {
    /// The page could not be served.
    #[error(transparent)]
    Playground(#[from] PlaygroundError),
    /// The crew URL is not a WebSocket address.
    #[error("the crew URL must start with ws:// or wss://, got `{0}`")]
    InvalidUrl(String),
    /// Writing the output failed.
    #[error("could not write the output")]
    Io(#[from] io::Error),
}

/// The line that tells where the page is.
pub fn page_line(page: SocketAddr, crew_url: &str) -> String {
    format!(
        "playground: {} (for the crew at {crew_url}); Ctrl-C stops",
        crewline_playground::page_url(page)
    )
}

/// Runs `crewline playground`: binds 127.0.0.1:`--port`, writes the page's address to `out`,
/// and serves the page until Ctrl-C or SIGTERM.
pub async fn run_cli(args: PlaygroundArgs, mut out: impl Write) -> Result<(), PlaygroundCliError> {
    let url = args.url.trim().to_owned();
    if !(url.starts_with("ws://") || url.starts_with("wss://")) {
        return Err(PlaygroundCliError::InvalidUrl(url));
    }
    let listener = crewline_playground::listen(args.playground_port).await?;
    let addr = listener.local_addr().map_err(PlaygroundError::Serve)?;
    writeln!(out, "{}", page_line(addr, &url))?;
    out.flush()?;
    let page = Playground::new(url).maybe_token(args.token).serve(listener);
    tokio::select! {
        served = page => served?,
        () = crewline_server::shutdown_signal() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_line_names_the_page_and_the_crew() {
        let line = page_line(
            SocketAddr::from(([127, 0, 0, 1], 7000)),
            "ws://127.0.0.1:8080/ws",
        );
        assert_eq!(
            line,
            "playground: http://127.0.0.1:7000/ (for the crew at ws://127.0.0.1:8080/ws); Ctrl-C stops"
        );
    }

    #[tokio::test]
    async fn a_url_that_is_not_a_websocket_is_refused_before_binding() {
        let args = PlaygroundArgs {
            url: "http://127.0.0.1:8080/ws".to_owned(),
            token: None,
            playground_port: 0,
        };
        let error = run_cli(args, Vec::new()).await.expect_err("refused");
        assert!(
            matches!(error, PlaygroundCliError::InvalidUrl(_)),
            "{error}"
        );
    }
}

//! `crewline new NAME`: writes a crew project its user owns, from one of three templates (the
//! voice agent, a router crew, remote tools): the crew with its tools and an offline scripted
//! model, a crewline-testkit test, an eval scenario, a Dockerfile and Kubernetes manifests, a
//! CI workflow, `.env.example` and a README with its two commands (`cargo run`, `cargo test`).
//!
//! The templates are files under `src/new/templates/`, embedded with `include_str!` (only
//! `src/` is packaged). Each is written as a real crate named `crew-template` (its manifest
//! `Cargo.toml.in`), so it reads and lints as Rust; generating replaces that name (`crew-template`, and
//! `crew_template` in Rust paths) with the project's, and `%%…%%` placeholders with the
//! dependencies' source (`version = "0.1"`, or `path = "…"` into a crewline checkout) and the
//! template's own README lines.
//!
//! Nothing here overwrites a file: the target directory must be missing or empty, and every
//! file is created new.

use std::{
    fmt, io,
    io::Write,
    path::{Path, PathBuf},
};

/// `crewline new`'s command line.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project's name: a crate name (letters, digits, `-` and `_`, starting with a letter).
    pub name: String,
    /// Which crew to start from.
    #[arg(long, value_enum, default_value_t)]
    pub template: Template,
    /// Where to write the project (default: ./NAME); must be missing or empty.
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Depend on the crewline crates of this checkout by path instead of by version (crewline
    /// is not on crates.io yet).
    #[arg(long, value_name = "CHECKOUT")]
    pub crewline_path: Option<PathBuf>,
}

/// A project template.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Template {
    /// A voice agent with one tool (`get_weather`).
    #[default]
    VoiceAgent,
    /// Two sub-agents on the deterministic router, one tool each.
    Router,
    /// A voice agent whose tool runs in another process, through the task API.
    RemoteTools,
}

impl Template {
    /// Every template.
    pub const ALL: [Template; 3] = [Self::VoiceAgent, Self::Router, Self::RemoteTools];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::VoiceAgent => "voice-agent",
            Self::Router => "router",
            Self::RemoteTools => "remote-tools",
        }
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the project's crewline dependencies come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrewlineSource {
    /// crates.io, at this crewline-cli's version.
    Registry,
    /// A crewline checkout (its root, absolute): `path = "<root>/crates/<crate>"`.
    Checkout(PathBuf),
}

impl CrewlineSource {
    /// The TOML keys (without braces) that name `krate`'s source.
    fn dependency(&self, krate: &str) -> String {
        match self {
            Self::Registry => format!("version = \"{}\"", registry_version()),
            Self::Checkout(root) => {
                let path = root.join("crates").join(krate);
                format!("path = {}", toml_string(&path.to_string_lossy()))
            }
        }
    }
}

/// The version requirement of the crewline crates: this release's `MAJOR.MINOR`.
fn registry_version() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => format!("{major}.{minor}"),
        _ => version.to_owned(),
    }
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// Why `crewline new` wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NewError {
    /// The name cannot be a crate's.
    #[error("`{name}` cannot be a crate's name: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The target exists and holds something: never overwritten.
    #[error(
        "{} already exists and is not empty: choose another NAME or --dir (nothing was written)",
        path.display()
    )]
    NotEmpty {
        /// The target directory.
        path: PathBuf,
    },
    /// `--crewline-path` is not a crewline checkout.
    #[error(
        "{} is not a crewline checkout (no crates/crewline/Cargo.toml in it)",
        path.display()
    )]
    NotACheckout {
        /// The path given.
        path: PathBuf,
    },
    /// A directory or file could not be read or written.
    #[error("could not write {}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The report could not be printed.
    #[error("could not write the output")]
    Output(#[source] io::Error),
}

/// One file of a template: its path in the project and its text.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
}

/// A template file at `$path` under `src/new/templates/$dir/`.
macro_rules! file {
    ($path:literal, $dir:literal, $source:literal) => {
        TemplateFile {
            path: $path,
            text: include_str!(concat!("templates/", $dir, "/", $source)),
        }
    };
}

/// The files every template shares.
const COMMON: &[TemplateFile] = &[
    file!("README.md", "common", "README.md"),
    file!(".gitignore", "common", "gitignore"),
    file!(".dockerignore", "common", "dockerignore"),
    file!(".env.example", "common", "env.example"),
    file!("Dockerfile", "common", "Dockerfile"),
    file!(".github/workflows/ci.yml", "common", "github/ci.yml"),
    file!(
        "kubernetes/deployment.yaml",
        "common",
        "kubernetes/deployment.yaml"
    ),
    file!(
        "kubernetes/service.yaml",
        "common",
        "kubernetes/service.yaml"
    ),
    file!("kubernetes/hpa.yaml", "common", "kubernetes/hpa.yaml"),
    file!(
        "kubernetes/hpa-active-sessions.yaml",
        "common",
        "kubernetes/hpa-active-sessions.yaml"
    ),
    file!("kubernetes/pdb.yaml", "common", "kubernetes/pdb.yaml"),
    file!(
        "kubernetes/secret.example.yaml",
        "common",
        "kubernetes/secret.example.yaml"
    ),
];

/// The crate's own files of each template.
macro_rules! crate_files {
    ($dir:literal) => {
        &[
            // Not `Cargo.toml`: cargo leaves a folder with a manifest out of a package.
            file!("Cargo.toml", $dir, "Cargo.toml.in"),
            file!("src/lib.rs", $dir, "src/lib.rs"),
            file!("src/main.rs", $dir, "src/main.rs"),
            file!("tests/crew.rs", $dir, "tests/crew.rs"),
            file!("evals/crew.toml", $dir, "evals/crew.toml"),
        ]
    };
}

const VOICE_AGENT: &[TemplateFile] = crate_files!("voice-agent");
const ROUTER: &[TemplateFile] = crate_files!("router");
const REMOTE_TOOLS: &[TemplateFile] = crate_files!("remote-tools");

/// The crewline crates a template's `Cargo.toml` names (`%%dep:<crate>%%`).
const CREWLINE_CRATES: [&str; 5] = [
    "crewline",
    "crewline-server",
    "crewline-remote",
    "crewline-testkit",
    "crewline-eval",
];

/// The name templates are written with (a crate name), and its Rust form.
const TEMPLATE_NAME: &str = "crew-template";
const TEMPLATE_IDENT: &str = "crew_template";

impl Template {
    fn files(self) -> &'static [TemplateFile] {
        match self {
            Self::VoiceAgent => VOICE_AGENT,
            Self::Router => ROUTER,
            Self::RemoteTools => REMOTE_TOOLS,
        }
    }

    /// The README's sentence on what the crew is.
    fn about(self) -> &'static str {
        match self {
            Self::VoiceAgent => {
                "a voice agent with one tool, `get_weather`, and a filler said while it runs."
            }
            Self::Router => {
                "two sub-agents on crewline's deterministic router, intake (`find_order`) and \
                 returns (`book_return`), the move between them decided in code from what the \
                 tools learned."
            }
            Self::RemoteTools => {
                "a voice agent whose tool, `get_weather`, runs in another process: the crew \
                 serves crewline's task API, and a client (this binary with `--client`) \
                 registers its tools there and answers the crew's tool calls over HTTP."
            }
        }
    }

    /// The README's lines on what to try.
    fn try_it(self) -> &'static str {
        match self {
            Self::VoiceAgent => {
                "Try: \"what's the weather in Paris?\", then \"and in Atlantis?\" (the tool's \
                 error, read back)."
            }
            Self::Router => {
                "Try: \"my order number is 1042\" (intake finds it, and the call moves to \
                 returns), then \"it leaks\" (returns books the return)."
            }
            Self::RemoteTools => {
                "The tool comes from a client. In a second terminal run\n\n\
                 ```sh\ncargo run -- --client --url http://127.0.0.1:8080\n```\n\n\
                 which prints `task_id=task_...`; give that id to the call \
                 (`crewline chat --url ws://127.0.0.1:8080/ws --var task_id=task_...`) and ask \
                 \"what's the weather in Oslo?\": the lookup runs in the client's process. \
                 The tasks live in the crew's memory: serve one replica, or keep them in Redis \
                 (`TaskApi::with_store`, as crewline's `remote_weather` example does) before \
                 running the three replicas of `kubernetes/deployment.yaml`."
            }
        }
    }
}

/// The files of `template` for the project `name` (already checked), each path relative to
/// the project's root.
pub fn render(template: Template, name: &str, source: &CrewlineSource) -> Vec<(PathBuf, String)> {
    let ident = name.replace('-', "_");
    template
        .files()
        .iter()
        .chain(COMMON)
        .map(|file| {
            // The name first: a checkout's path is written as it is, whatever it holds.
            let mut text = file
                .text
                .replace(TEMPLATE_NAME, name)
                .replace(TEMPLATE_IDENT, &ident)
                .replace("%%about%%", template.about())
                .replace("%%try%%", template.try_it());
            for krate in CREWLINE_CRATES {
                text = text.replace(&format!("%%dep:{krate}%%"), &source.dependency(krate));
            }
            (PathBuf::from(file.path), text)
        })
        .collect()
}

/// Names cargo refuses or that would clash with the project's own dependencies.
const RESERVED: &[&str] = &[
    "test",
    "std",
    "core",
    "alloc",
    "proc_macro",
    "proc-macro",
    "self",
    "crate",
    "super",
    "build",
    "deps",
    "examples",
    "incremental",
    "crewline",
    "crewline-server",
    "crewline-remote",
    "crewline-testkit",
    "crewline-eval",
    "clap",
    "serde_json",
    "serde-json",
    "tokio",
];

/// Rust's keywords: a crate named after one cannot be `use`d.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
    "return", "static", "struct", "trait", "true", "type", "unsafe", "use", "where", "while",
    "abstract", "become", "box", "do", "final", "gen", "macro", "override", "priv", "try",
    "typeof", "unsized", "virtual", "yield",
];

/// The longest name: the templates' longest `use <name>::{…};` line then stays within
/// rustfmt's 100 columns, so the project passes `cargo fmt --check` whatever its name.
pub const MAX_NAME_LEN: usize = 40;

/// Checks that `name` can be the project's crate name.
pub fn check_name(name: &str) -> Result<(), NewError> {
    let invalid = |reason| NewError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    let Some(first) = name.chars().next() else {
        return Err(invalid("it is empty"));
    };
    if name.len() > MAX_NAME_LEN {
        return Err(invalid(
            "it is longer than 40 characters (the generated code is formatted for up to 40)",
        ));
    }
    if !first.is_ascii_alphabetic() {
        return Err(invalid("it must start with an ASCII letter"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(invalid(
            "only ASCII letters, digits, `-` and `_` are allowed",
        ));
    }
    let ident = name.replace('-', "_");
    if KEYWORDS.contains(&ident.as_str()) {
        return Err(invalid("it is a Rust keyword"));
    }
    // `crewline_server` and `crewline-server` are one library name to rustc.
    let kebab = name.replace('_', "-");
    if [name, ident.as_str(), kebab.as_str()]
        .iter()
        .any(|form| RESERVED.contains(form))
    {
        return Err(invalid(
            "cargo reserves it, or the project depends on a crate of that name",
        ));
    }
    Ok(())
}

/// What `crewline new` was asked to do, with the defaults resolved.
#[derive(Debug, Clone)]
pub struct NewProject {
    /// The crate's name.
    pub name: String,
    /// The template.
    pub template: Template,
    /// The directory to write into (missing or empty).
    pub dir: PathBuf,
    /// Where the crewline dependencies come from.
    pub source: CrewlineSource,
}

impl NewProject {
    /// The project `args` ask for: the name checked, the checkout found and made absolute.
    pub fn from_args(args: NewArgs) -> Result<Self, NewError> {
        check_name(&args.name)?;
        let source = match args.crewline_path {
            None => CrewlineSource::Registry,
            Some(path) => {
                if !path.join("crates/crewline/Cargo.toml").is_file() {
                    return Err(NewError::NotACheckout { path });
                }
                // Absolute: the project's manifest is read from another directory.
                let root = std::path::absolute(&path)
                    .map_err(|source| NewError::Write { path, source })?;
                CrewlineSource::Checkout(root)
            }
        };
        Ok(Self {
            dir: args.dir.unwrap_or_else(|| PathBuf::from(&args.name)),
            name: args.name,
            template: args.template,
            source,
        })
    }

    /// Writes the project: creates its directory (refusing one that holds anything) and each
    /// file, never over an existing one. Returns the files written, relative to the project.
    pub fn write(&self) -> Result<Vec<PathBuf>, NewError> {
        ensure_empty(&self.dir)?;
        let files = render(self.template, &self.name, &self.source);
        let mut written = Vec::with_capacity(files.len());
        for (relative, text) in files {
            let path = self.dir.join(&relative);
            let fail = |source| NewError::Write {
                path: path.clone(),
                source,
            };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(fail)?;
            }
            // `create_new`: a file that appeared meanwhile is an error, not overwritten.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(fail)?;
            file.write_all(text.as_bytes()).map_err(fail)?;
            written.push(relative);
        }
        Ok(written)
    }
}

/// Creates `dir` when missing; refuses one that is not an empty directory.
fn ensure_empty(dir: &Path) -> Result<(), NewError> {
    let not_empty = || NewError::NotEmpty {
        path: dir.to_owned(),
    };
    let fail = |source| NewError::Write {
        path: dir.to_owned(),
        source,
    };
    if dir.exists() && !dir.is_dir() {
        // A file (or a link to one) is the user's: never replaced by a directory.
        return Err(not_empty());
    }
    match std::fs::read_dir(dir).map(|mut entries| entries.next().is_none()) {
        Ok(true) => Ok(()),
        Ok(false) => Err(not_empty()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(fail)
        }
        Err(error) => Err(fail(error)),
    }
}

/// Runs `crewline new`: writes the project, then prints what was written and the next two
/// commands to `out`.
pub fn run_cli(args: NewArgs, mut out: impl Write) -> Result<(), NewError> {
    let project = NewProject::from_args(args)?;
    let files = project.write()?;
    let dir = project.dir.display();
    let mut report = format!(
        "Created {} ({} template) in {dir}:\n",
        project.name, project.template
    );
    for file in &files {
        report.push_str(&format!("  {}\n", file.display()));
    }
    if project.source == CrewlineSource::Registry {
        report.push_str(
            "\ncrewline is not on crates.io yet: point Cargo.toml's crewline dependencies at a \
             checkout (`path = \"CHECKOUT/crates/<crate>\"`), or run `crewline new` again with \
             --crewline-path CHECKOUT.\n",
        );
    }
    report.push_str(&format!(
        "\nNext:\n  cd {dir}\n  cargo run     # the crew on ws://127.0.0.1:8080/ws (scripted model \
         without OPENAI_API_KEY)\n  cargo test    # its tests and eval scenarios, offline\n"
    ));
    out.write_all(report.as_bytes())
        .and_then(|()| out.flush())
        .map_err(NewError::Output)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn checkout() -> CrewlineSource {
        CrewlineSource::Checkout(PathBuf::from("/src/crew\"line"))
    }

    #[test]
    fn every_placeholder_and_the_template_name_are_replaced_in_every_file() {
        for template in Template::ALL {
            for source in [CrewlineSource::Registry, checkout()] {
                for (path, text) in render(template, "my-crew", &source) {
                    for left in ["%%", TEMPLATE_NAME, TEMPLATE_IDENT] {
                        assert!(
                            !text.contains(left),
                            "{template}: {} still holds {left}",
                            path.display()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_name_is_written_where_it_belongs() {
        let files: std::collections::HashMap<_, _> =
            render(Template::VoiceAgent, "my-crew", &CrewlineSource::Registry)
                .into_iter()
                .collect();
        let file = |path: &str| &files[Path::new(path)];
        assert!(file("Cargo.toml").contains("name = \"my-crew\""));
        assert!(file("src/main.rs").contains("use my_crew::"));
        assert!(file("tests/crew.rs").contains("use my_crew::"));
        assert!(file("README.md").starts_with("# my-crew\n"));
        assert!(file("Dockerfile").contains("--bin my-crew"));
        assert!(file("kubernetes/deployment.yaml").contains("image: my-crew:latest"));
    }

    #[test]
    fn with_the_longest_name_every_rust_line_stays_within_rustfmts_width() {
        let name = "a".repeat(MAX_NAME_LEN);
        check_name(&name).unwrap();
        check_name(&format!("{name}b")).unwrap_err();
        for template in Template::ALL {
            for (path, text) in render(template, &name, &CrewlineSource::Registry) {
                if path.extension().is_some_and(|ext| ext == "rs") {
                    for line in text.lines() {
                        assert!(line.len() <= 100, "{template}: {}: {line}", path.display());
                    }
                }
            }
        }
    }

    #[test]
    fn dependencies_name_a_version_or_a_path_into_the_checkout() {
        let manifest = |template, source| {
            render(template, "my-crew", &source)
                .into_iter()
                .find(|(path, _)| path == Path::new("Cargo.toml"))
                .unwrap()
                .1
        };
        let by_version = manifest(Template::RemoteTools, CrewlineSource::Registry);
        let version = registry_version();
        assert!(by_version.contains(&format!("crewline = {{ version = \"{version}\" }}")));
        assert!(by_version.contains(&format!(
            "crewline-server = {{ version = \"{version}\", features"
        )));
        assert!(by_version.contains(&format!("crewline-remote = {{ version = \"{version}\" }}")));
        // The path is a TOML string: a quote in it is escaped.
        let by_path = manifest(Template::Router, checkout());
        assert!(
            by_path.contains(
                r#"crewline-testkit = { path = "/src/crew\"line/crates/crewline-testkit" }"#
            ),
            "{by_path}"
        );
        assert!(!by_path.contains("crewline = { version"), "{by_path}");
    }

    #[test]
    fn names_that_cannot_be_a_crate_are_refused_with_the_reason() {
        for (name, reason) in [
            ("", "empty"),
            ("1crew", "start with an ASCII letter"),
            ("-crew", "start with an ASCII letter"),
            ("my crew", "only ASCII letters"),
            ("crew/../x", "only ASCII letters"),
            ("café", "only ASCII letters"),
            ("fn", "keyword"),
            ("test", "reserves"),
            ("crewline", "depends on a crate of that name"),
            ("crewline_server", "depends on a crate of that name"),
        ] {
            let error = check_name(name).unwrap_err().to_string();
            assert!(error.contains(reason), "{name}: {error}");
        }
        for name in ["my-crew", "support_bot", "Crew2"] {
            check_name(name).unwrap();
        }
    }

    #[test]
    fn a_project_is_written_into_a_new_or_empty_directory_only() {
        let root = std::env::temp_dir().join(format!("crewline-new-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let project = |dir: PathBuf| NewProject {
            name: "my-crew".into(),
            template: Template::Router,
            dir,
            source: CrewlineSource::Registry,
        };
        // Missing: created, every file written.
        let files = project(root.join("new")).write().unwrap();
        assert!(files.contains(&PathBuf::from("kubernetes/deployment.yaml")));
        assert!(root.join("new/.github/workflows/ci.yml").is_file());
        // Empty: written into.
        std::fs::create_dir_all(root.join("empty")).unwrap();
        project(root.join("empty")).write().unwrap();
        // Not empty, or a file: refused, and the user's file is untouched.
        std::fs::create_dir_all(root.join("mine")).unwrap();
        std::fs::write(root.join("mine/notes.txt"), "mine").unwrap();
        let error = project(root.join("mine")).write().unwrap_err();
        assert!(matches!(error, NewError::NotEmpty { .. }), "{error:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("mine/notes.txt")).unwrap(),
            "mine"
        );
        assert!(!root.join("mine/Cargo.toml").exists());
        let error = project(root.join("mine/notes.txt")).write().unwrap_err();
        assert!(matches!(error, NewError::NotEmpty { .. }), "{error:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_crewline_path_that_is_no_checkout_is_refused() {
        let args = NewArgs {
            name: "my-crew".into(),
            template: Template::VoiceAgent,
            dir: None,
            crewline_path: Some(std::env::temp_dir().join("no-crewline-here")),
        };
        let error = NewProject::from_args(args).unwrap_err();
        assert!(
            error.to_string().contains("is not a crewline checkout"),
            "{error}"
        );
    }
}

//! Parsing of the macros' own attributes: `#[function_tool(..)]`, `#[tools(..)]` and the
//! `#[arg(..)]` attribute on tool arguments.

use proc_macro2::{Span, TokenStream};
use syn::{
    Attribute, Expr, LitStr, Meta, Path, Token,
    meta::{ParseNestedMeta, parser},
    parse::Parser,
    spanned::Spanned,
};

/// Whether an attribute is `#[function_tool]` (under any path, such as `crewline::prelude::function_tool`).
pub(crate) fn is_function_tool(attr: &Attribute) -> bool {
    last_segment_is(attr.path(), "function_tool")
}

/// Whether an attribute is an argument's `#[arg(..)]`.
pub(crate) fn is_arg(attr: &Attribute) -> bool {
    attr.path().is_ident("arg")
}

fn last_segment_is(path: &Path, name: &str) -> bool {
    path.segments
        .last()
        .is_some_and(|segment| segment.ident == name)
}

/// The path generated code uses to reach `crewline` (`::crewline` unless `crate = path`).
pub(crate) fn default_crate_path() -> Path {
    syn::parse_quote!(::crewline)
}

/// The options of `#[function_tool(name = "..", description = "..", cancellable = false,
/// timeout_ms = N, confirm, cache_ttl_s = N, strict, dedupes_by_key, background, crate = path)]`.
#[derive(Default)]
pub(crate) struct ToolOptions {
    pub(crate) name: Option<LitStr>,
    pub(crate) description: Option<LitStr>,
    pub(crate) cancellable: Option<syn::LitBool>,
    /// The tool's time limit in milliseconds.
    pub(crate) timeout_ms: Option<u64>,
    /// Whether calls need approval (`confirm` or `confirm = bool`).
    pub(crate) confirm: Option<bool>,
    /// How long results are cached, in seconds.
    pub(crate) cache_ttl_s: Option<u64>,
    /// The targets of `export = "crew,mcp"` (`None`: the registry's default, crew only).
    pub(crate) export: Option<ExportList>,
    /// Whether the tool is strict (`strict` or `strict = bool`; `None`: the registry's default).
    pub(crate) strict: Option<bool>,
    /// Whether its downstream dedupes by the call's idempotency key (`dedupes_by_key` or
    /// `dedupes_by_key = bool`).
    pub(crate) dedupes_by_key: Option<bool>,
    /// Whether calls run in the background of the session (`background` or
    /// `background = bool`).
    pub(crate) background: Option<bool>,
    pub(crate) krate: Option<Path>,
}

impl ToolOptions {
    /// Parses the arguments of a `#[function_tool(..)]` macro invocation.
    pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let mut options = Self::default();
        parser(|meta| options.parse_meta(&meta)).parse2(tokens)?;
        Ok(options)
    }

    /// Parses a `#[function_tool]` attribute found on a method by `#[tools]`.
    pub(crate) fn from_attribute(attr: &Attribute) -> syn::Result<Self> {
        match &attr.meta {
            Meta::Path(_) => Ok(Self::default()),
            Meta::List(list) => Self::parse(list.tokens.clone()),
            Meta::NameValue(meta) => Err(syn::Error::new_spanned(
                meta,
                "expected `#[function_tool]` or `#[function_tool(name = \"..\", description = \"..\")]`",
            )),
        }
    }

    fn parse_meta(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        if meta.path.is_ident("name") {
            set_once(&mut self.name, meta, "name", |meta| meta.value()?.parse())
        } else if meta.path.is_ident("description") {
            set_once(&mut self.description, meta, "description", |meta| {
                let description: LitStr = meta.value()?.parse()?;
                if description.value().trim().is_empty() {
                    return Err(syn::Error::new_spanned(
                        &description,
                        "the description must not be empty: the model reads it to decide when to call the tool",
                    ));
                }
                Ok(description)
            })
        } else if meta.path.is_ident("cancellable") {
            set_once(&mut self.cancellable, meta, "cancellable", |meta| {
                meta.value()?.parse()
            })
        } else if meta.path.is_ident("timeout_ms") {
            set_once(&mut self.timeout_ms, meta, "timeout_ms", |meta| {
                positive(meta, "timeout_ms")
            })
        } else if meta.path.is_ident("cache_ttl_s") {
            set_once(&mut self.cache_ttl_s, meta, "cache_ttl_s", |meta| {
                positive(meta, "cache_ttl_s")
            })
        } else if meta.path.is_ident("confirm") {
            set_once(&mut self.confirm, meta, "confirm", flag)
        } else if meta.path.is_ident("strict") {
            set_once(&mut self.strict, meta, "strict", flag)
        } else if meta.path.is_ident("dedupes_by_key") {
            set_once(&mut self.dedupes_by_key, meta, "dedupes_by_key", flag)
        } else if meta.path.is_ident("background") {
            set_once(&mut self.background, meta, "background", flag)
        } else if meta.path.is_ident("export") {
            set_once(&mut self.export, meta, "export", |meta| {
                ExportList::parse(&meta.value()?.parse()?)
            })
        } else if meta.path.is_ident("crate") {
            set_once(&mut self.krate, meta, "crate", parse_crate_path)
        } else {
            Err(meta.error(format!(
                "unknown `#[function_tool]` option `{}`; expected `name = \"..\"`, `description = \"..\"`, `cancellable = false`, `timeout_ms = N`, `confirm`, `cache_ttl_s = N`, `strict`, `dedupes_by_key`, `background`, `export = \"crew,mcp,remote\"` or `crate = path`",
                path_text(&meta.path)
            )))
        }
    }
}

/// The targets of `export = "crew,mcp"`.
#[derive(Clone, Copy, Default)]
pub(crate) struct ExportList {
    pub(crate) crew: bool,
    pub(crate) mcp: bool,
    pub(crate) remote: bool,
}

impl ExportList {
    /// Parses a comma-separated list of `crew`, `mcp` and `remote` (at least one).
    fn parse(literal: &LitStr) -> syn::Result<Self> {
        let mut list = Self::default();
        let mut any = false;
        for target in literal.value().split(',').map(str::trim) {
            if target.is_empty() {
                continue;
            }
            let slot = match target {
                "crew" => &mut list.crew,
                "mcp" => &mut list.mcp,
                "remote" => &mut list.remote,
                other => {
                    return Err(syn::Error::new_spanned(
                        literal,
                        format!(
                            "unknown export target `{other}`; the valid targets are `crew`, `mcp` and `remote`"
                        ),
                    ));
                }
            };
            *slot = true;
            any = true;
        }
        if !any {
            return Err(syn::Error::new_spanned(
                literal,
                "`export` needs at least one target: `crew`, `mcp` or `remote` (separate several with commas)",
            ));
        }
        Ok(list)
    }
}

/// A flag's value: a bare `flag` means `flag = true`.
fn flag(meta: &ParseNestedMeta<'_>) -> syn::Result<bool> {
    if meta.input.peek(syn::Token![=]) {
        Ok(meta.value()?.parse::<syn::LitBool>()?.value())
    } else {
        Ok(true)
    }
}

/// A positive integer option value (`timeout_ms = 500`).
fn positive(meta: &ParseNestedMeta<'_>, option: &str) -> syn::Result<u64> {
    let literal: syn::LitInt = meta.value()?.parse()?;
    let value: u64 = literal.base10_parse()?;
    if value == 0 {
        return Err(syn::Error::new_spanned(
            &literal,
            format!("`{option}` must be greater than 0"),
        ));
    }
    Ok(value)
}

/// The options of `#[tools(crate = path)]`.
#[derive(Default)]
pub(crate) struct ImplOptions {
    pub(crate) krate: Option<Path>,
}

impl ImplOptions {
    /// Parses the arguments of a `#[tools(..)]` macro invocation.
    pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let mut options = Self::default();
        parser(|meta| {
            if meta.path.is_ident("crate") {
                set_once(&mut options.krate, &meta, "crate", parse_crate_path)
            } else {
                Err(meta.error(format!(
                    "unknown `#[tools]` option `{}`; the only option is `crate = path` (put `name`/`description` on each `#[function_tool]` method)",
                    path_text(&meta.path)
                )))
            }
        })
        .parse2(tokens)?;
        Ok(options)
    }
}

/// An argument's default value.
pub(crate) enum ArgDefault {
    /// `#[arg(default)]`: `Default::default()`.
    Trait(Span),
    /// `#[arg(default = expr)]`.
    Expr(Expr),
}

/// The options of `#[arg(default [= expr], description = "..")]` on one argument.
#[derive(Default)]
pub(crate) struct ArgOptions {
    pub(crate) default: Option<ArgDefault>,
    pub(crate) description: Option<LitStr>,
}

impl ArgOptions {
    /// Merges every `#[arg(..)]` in `attrs`.
    pub(crate) fn from_attributes(attrs: &[Attribute]) -> syn::Result<Self> {
        let mut options = Self::default();
        for attr in attrs.iter().filter(|attr| is_arg(attr)) {
            let Meta::List(_) = &attr.meta else {
                return Err(syn::Error::new_spanned(
                    attr,
                    "expected `#[arg(default = ..)]`, `#[arg(default)]` or `#[arg(description = \"..\")]`",
                ));
            };
            attr.parse_nested_meta(|meta| options.parse_meta(&meta))?;
        }
        Ok(options)
    }

    fn parse_meta(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        if meta.path.is_ident("default") {
            set_once(&mut self.default, meta, "default", |meta| {
                if meta.input.peek(Token![=]) {
                    Ok(ArgDefault::Expr(meta.value()?.parse()?))
                } else {
                    Ok(ArgDefault::Trait(meta.path.span()))
                }
            })
        } else if meta.path.is_ident("description") {
            set_once(&mut self.description, meta, "description", |meta| {
                meta.value()?.parse()
            })
        } else {
            Err(meta.error(format!(
                "unknown `#[arg]` option `{}`; expected `default = expr`, `default` or `description = \"..\"`",
                path_text(&meta.path)
            )))
        }
    }
}

fn set_once<T>(
    slot: &mut Option<T>,
    meta: &ParseNestedMeta<'_>,
    key: &str,
    parse: impl FnOnce(&ParseNestedMeta<'_>) -> syn::Result<T>,
) -> syn::Result<()> {
    if slot.is_some() {
        return Err(meta.error(format!("`{key}` is given more than once")));
    }
    *slot = Some(parse(meta)?);
    Ok(())
}

/// `crate = path` or `crate = "path"`.
fn parse_crate_path(meta: &ParseNestedMeta<'_>) -> syn::Result<Path> {
    let value = meta.value()?;
    if value.peek(LitStr) {
        value.parse::<LitStr>()?.parse()
    } else {
        value.parse()
    }
}

fn path_text(path: &Path) -> String {
    quote::quote!(#path).to_string().replace(' ', "")
}

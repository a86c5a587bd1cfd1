//! Turning a function signature and its attributes into a [`ToolSpec`]: everything the code
//! generators need, checked, with the compile errors a user can hit.

use proc_macro2::{Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Lit, Pat, Path, PathArguments, ReturnType,
    Signature, Type, ext::IdentExt,
};

use crate::{
    attr::{ArgDefault, ArgOptions, ExportList, ToolOptions, default_crate_path, is_arg},
    docs,
};

/// Where the tool's function lives.
#[derive(Clone, Copy)]
pub(crate) enum Context<'a> {
    /// A free function under `#[function_tool]`.
    Free,
    /// A method of a `#[tools]` impl block for `self_ty`.
    Method { self_ty: &'a Type },
}

/// How a method tool receives its agent.
pub(crate) enum Receiver {
    /// A free function or an associated function without `self`.
    None,
    /// `&self`.
    Ref,
}

/// What the function returns, as far as converting it to JSON goes.
pub(crate) enum Output {
    /// Nothing (`()` → `null`).
    Unit,
    /// `Result<T, E>`: `T: Serialize`, `E: Into<ToolError>`.
    Result(Type),
    /// Any other `T: Serialize`.
    Value(Type),
}

/// One argument of a tool.
pub(crate) struct ToolArg {
    /// The argument's name, as the function binds it.
    pub(crate) ident: Ident,
    /// Its type (with `Self` spelled out in methods).
    pub(crate) ty: Type,
    /// What the model reads about it.
    pub(crate) description: Option<String>,
    /// The expression (of type `ty`) used when the model leaves it out.
    pub(crate) default: Option<TokenStream>,
}

/// A checked tool.
pub(crate) struct ToolSpec {
    /// The function or method.
    pub(crate) fn_ident: Ident,
    /// The name the model calls.
    pub(crate) name: String,
    /// What the model reads about the tool.
    pub(crate) description: String,
    /// `async fn`?
    pub(crate) is_async: bool,
    /// Whether a barge-in may cancel a running call.
    pub(crate) cancellable: bool,
    /// The tool's time limit in milliseconds (`None`: the executor's default).
    pub(crate) timeout_ms: Option<u64>,
    /// Whether calls need approval.
    pub(crate) confirm: bool,
    /// How long results are cached, in seconds (`None`: not cached).
    pub(crate) cache_ttl_s: Option<u64>,
    /// The targets it is exported to (`None`: the registry's default, crew only).
    pub(crate) export: Option<ExportList>,
    /// Whether it is strict (`None`: the registry's default).
    pub(crate) strict: Option<bool>,
    /// Whether its downstream dedupes by the call's idempotency key.
    pub(crate) dedupes_by_key: bool,
    /// Whether calls run in the background of the session.
    pub(crate) background: bool,
    /// The type whose JSON Schema is the result schema (if it has one): the `T` of a
    /// `Result<T, E>`, otherwise the return type (`None` for `()` and `impl Trait`).
    pub(crate) result_ty: Option<Type>,
    /// How it takes its agent.
    pub(crate) receiver: Receiver,
    /// Its arguments, in order.
    pub(crate) args: Vec<ToolArg>,
    /// Its return type.
    pub(crate) output: Output,
    /// The path to `crewline` in generated code.
    pub(crate) krate: Path,
}

/// Collects several errors so that the user sees all of them at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// Checks `sig` and reads the tool out of it, `attrs` (its doc comment) and `options`; strips
/// the `#[arg]` attributes from `sig`'s arguments (even on error).
pub(crate) fn analyze(
    sig: &mut Signature,
    attrs: &[Attribute],
    options: ToolOptions,
    context: Context<'_>,
    outer_crate: Option<&Path>,
) -> syn::Result<ToolSpec> {
    let mut errors = Errors::default();
    let fn_name = sig.ident.unraw().to_string();

    if sig.unsafety.is_some() {
        errors.spanned(
            sig.unsafety,
            "a tool cannot be an `unsafe fn`: the model would call it without upholding its safety contract",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.spanned(
            &sig.generics,
            "a tool cannot be generic: the model's JSON arguments are deserialised into one concrete type with one JSON Schema; make the function concrete (or wrap it in a concrete one)",
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.spanned(variadic, "a tool cannot be variadic");
    }

    let docs = docs::parse(attrs);
    let mut receiver = Receiver::None;
    let mut args = Vec::new();
    for input in &mut sig.inputs {
        match input {
            FnArg::Receiver(self_arg) => match context {
                Context::Free => errors.spanned(
                    &*self_arg,
                    "`#[function_tool]` on a method needs `#[tools]` on its impl block: write `#[tools] impl YourAgent { .. }`, then register the methods with `registry.discover(&agent)`",
                ),
                Context::Method { .. } => {
                    let by_shared_ref = match &*self_arg.ty {
                        Type::Reference(reference) => {
                            reference.mutability.is_none() && is_self(&reference.elem)
                        }
                        _ => false,
                    };
                    if by_shared_ref {
                        receiver = Receiver::Ref;
                    } else {
                        errors.spanned(
                            &*self_arg,
                            "tools take `&self`: tools of one agent may run at the same time, each holding a shared `Arc` of it; keep mutable state behind a `Mutex` or an atomic",
                        );
                    }
                }
            },
            FnArg::Typed(typed) => {
                let arg_options = match ArgOptions::from_attributes(&typed.attrs) {
                    Ok(options) => options,
                    Err(error) => {
                        errors.push(error);
                        ArgOptions::default()
                    }
                };
                typed.attrs.retain(|attr| !is_arg(attr));
                let ident = match &*typed.pat {
                    Pat::Ident(pat)
                        if pat.by_ref.is_none() && pat.subpat.is_none() =>
                    {
                        pat.ident.clone()
                    }
                    Pat::Wild(wild) => {
                        errors.spanned(
                            wild,
                            "name this argument: the model passes tool arguments by name",
                        );
                        continue;
                    }
                    pat => {
                        errors.spanned(
                            pat,
                            "a tool argument must be a plain name, not a pattern: the model passes arguments by name; take the whole value (`point: Point`) and destructure it in the body",
                        );
                        continue;
                    }
                };
                check_owned_type(&typed.ty, &mut errors);
                let ty = match context {
                    Context::Free => (*typed.ty).clone(),
                    Context::Method { self_ty } => {
                        replace_self_in_type(&typed.ty, self_ty).unwrap_or_else(|error| {
                            errors.push(error);
                            (*typed.ty).clone()
                        })
                    }
                };
                let default = arg_options.default.map(|default| {
                    if is_option(&ty) {
                        errors.spanned(
                            &typed.ty,
                            "an `Option` argument is already optional (the model may leave it out); remove `#[arg(default ..)]` or make the type non-`Option`",
                        );
                    }
                    let expr = match default {
                        ArgDefault::Trait(span) => {
                            quote_spanned!(span=> ::core::default::Default::default())
                        }
                        ArgDefault::Expr(Expr::Lit(ExprLit {
                            lit: Lit::Str(lit), ..
                        })) => quote_spanned!(lit.span()=> ::core::convert::Into::into(#lit)),
                        ArgDefault::Expr(expr) => expr.to_token_stream(),
                    };
                    match context {
                        Context::Free => expr,
                        Context::Method { self_ty } => replace_self(expr, &self_expr(self_ty)),
                    }
                });
                args.push(ToolArg {
                    ident,
                    ty,
                    description: arg_options.description.map(|text| text.value()),
                    default,
                });
            }
        }
    }

    // The `# Arguments` section: descriptions, and typos caught.
    let mut documented: Vec<&str> = Vec::new();
    for entry in &docs.arguments {
        if documented.contains(&entry.name.as_str()) {
            errors.push(syn::Error::new(
                entry.span,
                format!("the `# Arguments` section documents `{}` twice", entry.name),
            ));
            continue;
        }
        documented.push(&entry.name);
        match args.iter_mut().find(|arg| arg.ident.unraw() == entry.name) {
            Some(arg) => {
                if arg.description.is_none() && !entry.text.is_empty() {
                    arg.description = Some(entry.text.clone());
                }
            }
            None => {
                let names: Vec<String> = args
                    .iter()
                    .map(|arg| format!("`{}`", arg.ident.unraw()))
                    .collect();
                let known = if names.is_empty() {
                    "it has no arguments".to_owned()
                } else {
                    format!("its arguments are {}", names.join(", "))
                };
                errors.push(syn::Error::new(
                    entry.span,
                    format!(
                        "the `# Arguments` section documents `{}`, which is not an argument of `{fn_name}` ({known})",
                        entry.name
                    ),
                ));
            }
        }
    }

    let (name, name_span) = match &options.name {
        Some(name) => (name.value(), name.span()),
        None => (fn_name.clone(), sig.ident.span()),
    };
    if !is_valid_tool_name(&name) {
        let hint = if options.name.is_some() {
            ""
        } else {
            "; pick one with `#[function_tool(name = \"..\")]`"
        };
        errors.push(syn::Error::new(
            name_span,
            format!(
                "`{name}` is not a valid tool name: models accept 1 to 64 characters from a-z, A-Z, 0-9, `_` and `-`{hint}"
            ),
        ));
    }

    let description = match &options.description {
        Some(description) => description.value().trim().to_owned(),
        None => docs.description,
    };
    if description.is_empty() {
        errors.spanned(
            &sig.ident,
            format!(
                "`{fn_name}` needs a description for the model: add a doc comment (`/// What the tool does.`) or `#[function_tool(description = \"..\")]`"
            ),
        );
    }

    let output = match &sig.output {
        ReturnType::Default => Output::Unit,
        ReturnType::Type(_, ty) if is_last_segment(ty, "Result") => Output::Result((**ty).clone()),
        ReturnType::Type(_, ty) => Output::Value((**ty).clone()),
    };

    let result_ty = result_type(&output).and_then(|ty| match context {
        Context::Free => Some(ty),
        // A return type that does not parse once `Self` is spelled out simply has no schema.
        Context::Method { self_ty } => replace_self_in_type(&ty, self_ty).ok(),
    });

    errors.finish()?;
    Ok(ToolSpec {
        fn_ident: sig.ident.clone(),
        name,
        description,
        is_async: sig.asyncness.is_some(),
        cancellable: options.cancellable.as_ref().is_none_or(syn::LitBool::value),
        timeout_ms: options.timeout_ms,
        confirm: options.confirm.unwrap_or(false),
        cache_ttl_s: options.cache_ttl_s,
        export: options.export,
        strict: options.strict,
        dedupes_by_key: options.dedupes_by_key.unwrap_or(false),
        background: options.background.unwrap_or(false),
        result_ty,
        receiver,
        args,
        output,
        krate: options
            .krate
            .or_else(|| outer_crate.cloned())
            .unwrap_or_else(default_crate_path),
    })
}

/// `^[a-zA-Z0-9_-]{1,64}$`.
fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

/// The type a tool's result schema is written from: the `T` of `Result<T, E>` (or of an alias
/// such as `io::Result<T>`), otherwise the return type itself; `None` for `()`, for a `Result`
/// without type arguments and for types containing `impl Trait` (which cannot be named).
fn result_type(output: &Output) -> Option<Type> {
    let ty = match output {
        Output::Unit => return None,
        Output::Value(ty) => ty.clone(),
        Output::Result(ty) => {
            let Type::Path(path) = ty else { return None };
            let PathArguments::AngleBracketed(generics) = &path.path.segments.last()?.arguments
            else {
                return None;
            };
            generics.args.iter().find_map(|argument| match argument {
                GenericArgument::Type(ty) => Some(ty.clone()),
                _ => None,
            })?
        }
    };
    let is_unit = matches!(&ty, Type::Tuple(tuple) if tuple.elems.is_empty());
    (!is_unit && !mentions_impl(ty.to_token_stream())).then_some(ty)
}

/// Whether `tokens` contain the `impl` keyword (an `impl Trait` type).
fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
}

fn is_self(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none() && path.path.is_ident("Self"))
}

fn is_last_segment(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == name),
        Type::Group(group) => is_last_segment(&group.elem, name),
        Type::Paren(paren) => is_last_segment(&paren.elem, name),
        _ => false,
    }
}

fn is_option(ty: &Type) -> bool {
    is_last_segment(ty, "Option")
}

/// Rejects types that cannot be deserialised from the model's JSON as owned values.
fn check_owned_type(ty: &Type, errors: &mut Errors) {
    match ty {
        Type::Reference(reference) => errors.spanned(
            reference,
            "tool arguments are deserialised from the model's JSON, so they must own their data: use an owned type such as `String` (for `&str`), `Vec<T>` (for `&[T]`) or `T` (for `&T`)",
        ),
        Type::ImplTrait(impl_trait) => errors.spanned(
            impl_trait,
            "a tool argument cannot be `impl Trait`: the model's JSON is deserialised into one concrete type; name that type",
        ),
        Type::TraitObject(object) => errors.spanned(
            object,
            "a tool argument cannot be a trait object: the model's JSON is deserialised into one concrete type; name that type",
        ),
        Type::Ptr(pointer) => errors.spanned(
            pointer,
            "a tool argument cannot be a raw pointer: use an owned type",
        ),
        Type::Array(array) => check_owned_type(&array.elem, errors),
        Type::Slice(slice) => check_owned_type(&slice.elem, errors),
        Type::Group(group) => check_owned_type(&group.elem, errors),
        Type::Paren(paren) => check_owned_type(&paren.elem, errors),
        Type::Tuple(tuple) => tuple
            .elems
            .iter()
            .for_each(|elem| check_owned_type(elem, errors)),
        Type::Path(path) => {
            if let Some(qself) = &path.qself {
                check_owned_type(&qself.ty, errors);
            }
            for segment in &path.path.segments {
                if let PathArguments::AngleBracketed(generics) = &segment.arguments {
                    for argument in &generics.args {
                        if let GenericArgument::Type(ty) = argument {
                            check_owned_type(ty, errors);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// `Self` in a method's argument type, replaced by the impl's type (the generated argument
/// struct lives outside the impl block).
fn replace_self_in_type(ty: &Type, self_ty: &Type) -> syn::Result<Type> {
    syn::parse2(replace_self(
        ty.to_token_stream(),
        &self_ty.to_token_stream(),
    ))
}

/// How to name the impl's type in expression position (`<Foo<u8>>` needs the angle brackets).
fn self_expr(self_ty: &Type) -> TokenStream {
    let has_generic_args = matches!(self_ty, Type::Path(path)
        if path.path.segments.iter().any(|segment| !segment.arguments.is_none()));
    if has_generic_args || !matches!(self_ty, Type::Path(_)) {
        quote!(<#self_ty>)
    } else {
        self_ty.to_token_stream()
    }
}

/// Replaces every `Self` token (also inside macro calls) by `replacement`.
pub(crate) fn replace_self(tokens: TokenStream, replacement: &TokenStream) -> TokenStream {
    let mut out = TokenStream::new();
    for token in tokens {
        match token {
            TokenTree::Ident(ident) if ident == "Self" => {
                out.extend(respan(replacement.clone(), ident.span()));
            }
            TokenTree::Group(group) => {
                let mut replaced =
                    Group::new(group.delimiter(), replace_self(group.stream(), replacement));
                replaced.set_span(group.span());
                out.extend([TokenTree::Group(replaced)]);
            }
            other => out.extend([other]),
        }
    }
    out
}

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut respanned = Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                token = TokenTree::Group(respanned);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_models_rule() {
        assert!(is_valid_tool_name("get_weather-2"));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("météo"));
        assert!(!is_valid_tool_name("get weather"));
        assert!(!is_valid_tool_name(&"a".repeat(65)));
        assert!(is_valid_tool_name(&"a".repeat(64)));
    }

    #[test]
    fn self_is_replaced_everywhere() {
        let replaced = replace_self(quote!(Vec<Self::Kind>, m!(Self)), &quote!(crate::Agent));
        assert_eq!(
            replaced.to_string(),
            quote!(Vec<crate::Agent::Kind>, m!(crate::Agent)).to_string()
        );
    }
}

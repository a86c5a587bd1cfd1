//! The code shared by free-function and method tools: the hidden arguments struct, the
//! defaults, and the `Tool` impl.
//!
//! Everything here is emitted inside a `const _: () = { .. };` block, so none of it can clash
//! with the user's names or needs docs; only the tool struct itself is declared outside.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Path, Type, ext::IdentExt, spanned::Spanned};

use crate::spec::{Output, Receiver, ToolSpec};

/// How the generated `call` reaches the user's function.
pub(crate) enum Callee<'a> {
    /// A free function, in scope by its name.
    Free,
    /// A method or associated function of `self_ty`; the tool struct holds the agent as
    /// field `.0`, an `Arc<A>` where `A: SameAs<self_ty>`.
    Method { self_ty: &'a Type },
}

/// The arguments struct, the default helpers and `impl #generics Tool for #tool_ty #bounds`.
pub(crate) fn tool_items(
    spec: &ToolSpec,
    generics: &TokenStream,
    tool_ty: &TokenStream,
    bounds: &TokenStream,
    callee: Callee<'_>,
) -> TokenStream {
    let krate = &spec.krate;
    let private = quote!(#krate::__private);
    let stem = spec.fn_ident.unraw();
    let args_ident = format_ident!("__CrewlineArgs_{}", stem);
    let name = &spec.name;
    let description = &spec.description;

    let mut fields = Vec::new();
    let mut helpers = Vec::new();
    let mut bindings = Vec::new();
    let mut apply_defaults = Vec::new();
    for arg in &spec.args {
        let ident = &arg.ident;
        let ty = &arg.ty;
        let text = arg.description.clone().unwrap_or_default();
        bindings.push(ident);
        match &arg.default {
            None => {
                let description =
                    (!text.is_empty()).then(|| quote!(#[schemars(description = #text)]));
                fields.push(quote!(#description #ident: #ty));
            }
            Some(default) => {
                let default_fn = format_ident!("__crewline_default_{}_{}", stem, ident.unraw());
                let describe_fn = format_ident!("__crewline_describe_{}_{}", stem, ident.unraw());
                helpers.push(quote! {
                    #[allow(non_snake_case)]
                    fn #default_fn() -> #ty {
                        #default
                    }
                    #[allow(non_snake_case)]
                    fn #describe_fn() -> ::std::string::String {
                        #[allow(unused_imports)]
                        use #private::{OpaqueDefault as _, SerializeDefault as _};
                        #private::describe_default(
                            #text,
                            (&&#private::DefaultValue(#default_fn())).default_json(),
                        )
                    }
                });
                fields.push(quote! {
                    #[schemars(description = #describe_fn())]
                    #ident: ::core::option::Option<#ty>
                });
                apply_defaults.push(quote_spanned! {ident.span()=>
                    let #ident = ::core::option::Option::unwrap_or_else(#ident, #default_fn);
                });
            }
        }
    }

    let serde_crate = path_string(krate, "serde");
    let schemars_crate = path_string(krate, "schemars");
    let fn_ident = &spec.fn_ident;
    let call_span = fn_ident.span();
    let invoke = match (callee, &spec.receiver, spec.is_async) {
        (Callee::Free, _, true) => quote_spanned!(call_span=> #fn_ident(#(#bindings),*).await),
        // Without arguments, the function itself is the closure (clippy: redundant_closure).
        (Callee::Free, _, false) if bindings.is_empty() => quote_spanned! {call_span=>
            #private::run_blocking(#name, #fn_ident).await?
        },
        (Callee::Free, _, false) => quote_spanned! {call_span=>
            #private::run_blocking(#name, move || #fn_ident(#(#bindings),*)).await?
        },
        // The tool struct is generic over the agent `A` (see `__private::SameAs`).
        (Callee::Method { self_ty }, Receiver::Ref, true) => quote_spanned! {call_span=>
            <#self_ty>::#fn_ident(#private::SameAs::same(&*self.0), #(#bindings),*).await
        },
        (Callee::Method { self_ty }, Receiver::Ref, false) => quote_spanned! {call_span=>
            {
                let __crewline_agent = #private::Arc::clone(&self.0);
                #private::run_blocking(
                    #name,
                    move || <#self_ty>::#fn_ident(
                        #private::SameAs::same(&*__crewline_agent),
                        #(#bindings),*
                    ),
                )
                .await?
            }
        },
        (Callee::Method { self_ty }, Receiver::None, true) => quote_spanned! {call_span=>
            <#self_ty>::#fn_ident(#(#bindings),*).await
        },
        (Callee::Method { self_ty }, Receiver::None, false) if bindings.is_empty() => {
            quote_spanned! {call_span=>
                #private::run_blocking(#name, <#self_ty>::#fn_ident).await?
            }
        }
        (Callee::Method { self_ty }, Receiver::None, false) => quote_spanned! {call_span=>
            #private::run_blocking(#name, move || <#self_ty>::#fn_ident(#(#bindings),*)).await?
        },
    };
    let convert = match &spec.output {
        Output::Unit => quote!(#private::output_value(__crewline_output)),
        Output::Result(ty) => quote_spanned!(ty.span()=> #private::result_value(__crewline_output)),
        Output::Value(ty) => quote_spanned!(ty.span()=> #private::output_value(__crewline_output)),
    };

    // Only written when an option changes it (the trait's default policy otherwise).
    let policy = (!spec.cancellable
        || spec.timeout_ms.is_some()
        || spec.confirm
        || spec.cache_ttl_s.is_some()
        || spec.export.is_some()
        || spec.strict.is_some()
        || spec.dedupes_by_key
        || spec.background)
        .then(|| {
            let timeout = spec
                .timeout_ms
                .map(|ms| quote!(.timeout(#private::Duration::from_millis(#ms))));
            let confirm = spec.confirm.then(|| quote!(.confirm(true)));
            let cache = spec
                .cache_ttl_s
                .map(|s| quote!(.cache_ttl(#private::Duration::from_secs(#s))));
            let exports = spec.export.map(|list| {
                let (crew, mcp, remote) = (list.crew, list.mcp, list.remote);
                quote! {
                    .exports(#private::Exports {
                        crew: #crew,
                        mcp: #mcp,
                        remote: #remote,
                    })
                }
            });
            let cancellable = (!spec.cancellable).then(|| quote!(.cancellable(false)));
            let strict = spec.strict.map(|strict| quote!(.strict(#strict)));
            let dedupes = spec.dedupes_by_key.then(|| quote!(.dedupes_by_key(true)));
            let background = spec.background.then(|| quote!(.background(true)));
            quote! {
                fn policy(&self) -> #private::ToolPolicy {
                    #private::ToolPolicy::new()
                        #cancellable
                        #timeout
                        #confirm
                        #cache
                        #exports
                        #strict
                        #dedupes
                        #background
                }
            }
        });

    // Autoref specialisation (see `__private::ResultSchema`): a schema only when the type
    // implements `JsonSchema`, without the macro having to know whether it does.
    let result_schema = spec.result_ty.as_ref().map(|ty| {
        quote! {
            fn result_schema(&self) -> ::core::option::Option<#private::Value> {
                static SCHEMA: #private::OnceLock<::core::option::Option<#private::Value>> =
                    #private::OnceLock::new();
                ::core::clone::Clone::clone(SCHEMA.get_or_init(|| {
                    #[allow(unused_imports)]
                    use #private::{JsonResultSchema as _, NoResultSchema as _};
                    (&&#private::ResultSchema::<#ty>::new()).result_schema()
                }))
            }
        }
    });

    quote! {
        #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
        #[serde(crate = #serde_crate)]
        #[schemars(crate = #schemars_crate, rename = #name)]
        #[allow(non_camel_case_types, non_snake_case)]
        struct #args_ident {
            #(#fields,)*
        }

        #(#helpers)*

        #[#private::async_trait]
        impl #generics #private::Tool for #tool_ty #bounds {
            fn name(&self) -> &str {
                #name
            }

            fn description(&self) -> &str {
                #description
            }

            #policy

            #result_schema

            fn parameters(&self) -> #private::Value {
                static SCHEMA: #private::OnceLock<#private::Value> = #private::OnceLock::new();
                ::core::clone::Clone::clone(
                    SCHEMA.get_or_init(#private::schema_for::<#args_ident>),
                )
            }

            async fn call(
                &self,
                arguments: #private::Value,
            ) -> ::core::result::Result<#private::Value, #private::ToolError> {
                let #args_ident { #(#bindings),* } =
                    #private::parse_arguments::<#args_ident>(arguments)?;
                #(#apply_defaults)*
                let __crewline_output = #invoke;
                #convert
            }
        }
    }
}

/// `"<krate>::__private::<module>"`, for serde's and schemars' `crate = ".."`.
fn path_string(krate: &Path, module: &str) -> String {
    let krate = quote!(#krate).to_string().replace(' ', "");
    format!("{krate}::__private::{module}")
}

/// `get_weather` → `GetWeather` (the tool struct's name, before `Tool`).
pub(crate) fn upper_camel_case(ident: &Ident) -> String {
    let mut out = String::new();
    for word in ident.unraw().to_string().split('_') {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_names_are_upper_camel_case() {
        let name = |text: &str| upper_camel_case(&syn::parse_str::<Ident>(text).unwrap());
        assert_eq!(name("get_weather"), "GetWeather");
        assert_eq!(name("r#type"), "Type");
        assert_eq!(name("_private__fn"), "PrivateFn");
        assert_eq!(name("get_HTTP_status"), "GetHTTPStatus");
    }
}

//! `#[tools]` on an impl block: every `#[function_tool]` method becomes a hidden tool struct
//! holding an `Arc` of the agent, and the agent implements `ToolProvider`, listing them in
//! method order (what `ToolRegistry::discover` registers).

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::{ImplItem, ItemImpl, ext::IdentExt, spanned::Spanned};

use crate::{
    attr::{ImplOptions, ToolOptions, default_crate_path, is_function_tool},
    codegen::{Callee, tool_items},
    spec::{Context, Errors, analyze},
};

/// Expands `#[tools(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut block: ItemImpl = match syn::parse2(item.clone()) {
        Ok(block) => block,
        Err(_) => {
            let error = syn::Error::new_spanned(
                &item,
                "`#[tools]` goes on an impl block: `#[tools] impl YourAgent { .. }`",
            )
            .into_compile_error();
            return quote!(#item #error);
        }
    };

    let mut errors = Errors::default();
    let options = ImplOptions::parse(attr).unwrap_or_else(|error| {
        errors.push(error);
        ImplOptions::default()
    });
    if let Some((_, path, _)) = &block.trait_ {
        errors.spanned(
            path,
            "`#[tools]` goes on an inherent impl block (`impl YourAgent { .. }`), not on a trait impl",
        );
    }
    if !block.generics.params.is_empty() || block.generics.where_clause.is_some() {
        errors.spanned(
            &block.generics,
            "`#[tools]` does not support generic impl blocks: each tool needs one concrete agent type; put the tools in an `impl` for a concrete type",
        );
    }

    let self_ty = (*block.self_ty).clone();
    let krate = options.krate.clone().unwrap_or_else(default_crate_path);
    let mut tools = Vec::new();
    for item in &mut block.items {
        let ImplItem::Fn(method) = item else {
            continue;
        };
        let mut markers = method.attrs.iter().filter(|attr| is_function_tool(attr));
        let Some(marker) = markers.next().cloned() else {
            continue;
        };
        if let Some(again) = markers.next() {
            errors.spanned(again, "`#[function_tool]` is given more than once");
        }
        method.attrs.retain(|attr| !is_function_tool(attr));
        let tool_options = ToolOptions::from_attribute(&marker).unwrap_or_else(|error| {
            errors.push(error);
            ToolOptions::default()
        });
        match analyze(
            &mut method.sig,
            &method.attrs,
            tool_options,
            Context::Method { self_ty: &self_ty },
            options.krate.as_ref(),
        ) {
            Ok(spec) => tools.push(spec),
            Err(error) => errors.push(error),
        }
    }

    if let Err(error) = errors.finish() {
        let error = error.into_compile_error();
        return quote!(#block #error);
    }

    // Every tool struct is generic over the agent, `A: ToolProvider + SameAs<Agent>` (only
    // ever `Agent`): inside, `A: Send + Sync + 'static` follows from `ToolProvider`, so an
    // agent that is not thread-safe gets its errors on `impl ToolProvider` alone.
    let private = quote!(#krate::__private);
    let agent_bounds = quote!(where A: #private::ToolProvider + #private::SameAs<#self_ty>);
    let mut items = Vec::new();
    let mut constructors = Vec::new();
    for spec in &tools {
        let tool_ident = format_ident!("__CrewlineTool_{}", spec.fn_ident.unraw());
        items.push(quote! {
            #[allow(non_camel_case_types)]
            struct #tool_ident<A>(#private::Arc<A>);
        });
        items.push(tool_items(
            spec,
            &quote!(<A>),
            &quote!(#tool_ident<A>),
            &agent_bounds,
            Callee::Method { self_ty: &self_ty },
        ));
        constructors.push(quote! {
            #private::Arc::new(#tool_ident(#private::Arc::clone(agent)))
        });
    }
    let provider = quote_spanned! {self_ty.span()=>
        impl #private::ToolProvider for #self_ty
    };

    quote! {
        #block

        const _: () = {
            #(#items)*

            fn __crewline_tools<A>(
                agent: &#private::Arc<A>,
            ) -> ::std::vec::Vec<#private::Arc<dyn #private::Tool>>
            #agent_bounds
            {
                ::std::vec![#(#constructors),*]
            }

            #provider {
                fn tools(
                    agent: &#private::Arc<Self>,
                ) -> ::std::vec::Vec<#private::Arc<dyn #private::Tool>> {
                    __crewline_tools(agent)
                }
            }
        };
    }
}

//! `#[function_tool]` on a free function: the function is kept as is, and a unit struct
//! `<UpperCamelName>Tool` with the function's visibility implements `Tool` next to it.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{FnArg, Item, ItemFn, Signature};

use crate::{
    attr::{ToolOptions, is_arg},
    codegen::{Callee, tool_items, upper_camel_case},
    spec::{Context, analyze},
};

/// Expands `#[function_tool(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut function: ItemFn = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(function)) => function,
        Ok(other) => {
            let error = syn::Error::new_spanned(
                other,
                "`#[function_tool]` goes on a `fn` (or on a method inside a `#[tools]` impl block)",
            );
            return with_error(item, error);
        }
        Err(error) => return with_error(item, error),
    };

    let options = match ToolOptions::parse(attr) {
        Ok(options) => options,
        Err(error) => {
            strip_arg_attributes(&mut function.sig);
            return with_error(quote!(#function), error);
        }
    };
    let spec = match analyze(
        &mut function.sig,
        &function.attrs,
        options,
        Context::Free,
        None,
    ) {
        Ok(spec) => spec,
        Err(error) => {
            strip_arg_attributes(&mut function.sig);
            return with_error(quote!(#function), error);
        }
    };

    let vis = &function.vis;
    let fn_ident = &function.sig.ident;
    let tool_ident = format_ident!("{}Tool", upper_camel_case(fn_ident), span = fn_ident.span());
    let doc = format!(
        "The `{}` tool, made by `#[function_tool]` from the function `{}`: register it with `ToolRegistry::register({tool_ident})`.",
        spec.name,
        syn::ext::IdentExt::unraw(fn_ident),
    );
    let items = tool_items(
        &spec,
        &quote!(),
        &quote!(#tool_ident),
        &quote!(),
        Callee::Free,
    );
    quote! {
        #function

        #[doc = #doc]
        #[allow(dead_code)]
        #[derive(
            ::core::clone::Clone,
            ::core::marker::Copy,
            ::core::fmt::Debug,
            ::core::default::Default,
        )]
        #vis struct #tool_ident;

        const _: () = {
            #items
        };
    }
}

/// Removes `#[arg(..)]` from the arguments, so that an error elsewhere does not also bring
/// "cannot find attribute `arg`".
fn strip_arg_attributes(sig: &mut Signature) {
    for input in &mut sig.inputs {
        if let FnArg::Typed(typed) = input {
            typed.attrs.retain(|attr| !is_arg(attr));
        }
    }
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote!(#item #error)
}

//! Reading a tool's description and its arguments' descriptions out of rustdoc comments.
//!
//! The tool description is the text before the first Markdown heading, with soft-wrapped
//! lines joined and paragraphs kept. An `# Arguments` section (any heading level; also
//! `Args` or `Parameters`) lists the arguments, in any of these forms:
//!
//! ```text
//! * `location` - City and state, e.g. San Francisco, CA
//! - `unit`: Temperature unit
//! * days - How many days ahead,
//!   continued on the next line
//! ```

use proc_macro2::Span;
use syn::{Attribute, Expr, ExprLit, Lit, Meta, spanned::Spanned};

/// What a doc comment says.
pub(crate) struct Docs {
    /// The description: the text before the first heading.
    pub(crate) description: String,
    /// The entries of the `# Arguments` section, in order.
    pub(crate) arguments: Vec<ArgumentDoc>,
}

/// One entry of an `# Arguments` section.
pub(crate) struct ArgumentDoc {
    /// The argument's name as written (backticks removed).
    pub(crate) name: String,
    /// Its description, continuation lines joined.
    pub(crate) text: String,
    /// The doc comment line the entry starts on.
    pub(crate) span: Span,
}

struct Line {
    text: String,
    span: Span,
}

/// Reads the `#[doc = ".."]` attributes (`///` and `/** */` comments) in `attrs`.
///
/// Doc attributes whose value is not a string literal (`#[doc = include_str!(..)]`) are skipped.
pub(crate) fn parse(attrs: &[Attribute]) -> Docs {
    let lines = unindent(doc_lines(attrs));
    let mut description = Vec::new();
    let mut arguments = Vec::new();
    let mut section = Section::Description;
    let mut fence: Option<&str> = None;
    for line in &lines {
        let trimmed = line.text.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
        } else if let Some(marker) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = Some(marker);
        } else if let Some(title) = heading(&line.text) {
            section = if ["arguments", "args", "parameters", "params"]
                .contains(&title.trim_end_matches(':').to_ascii_lowercase().as_str())
            {
                Section::Arguments
            } else {
                Section::Other
            };
            continue;
        }
        match section {
            Section::Description => description.push(line.text.as_str()),
            Section::Arguments => arguments.push(line),
            Section::Other => {}
        }
    }
    Docs {
        description: reflow(&description),
        arguments: parse_arguments(&arguments),
    }
}

enum Section {
    Description,
    Arguments,
    Other,
}

fn doc_lines(attrs: &[Attribute]) -> Vec<Line> {
    let mut lines = Vec::new();
    for attr in attrs {
        let Meta::NameValue(meta) = &attr.meta else {
            continue;
        };
        if !meta.path.is_ident("doc") {
            continue;
        }
        let Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) = &meta.value
        else {
            continue;
        };
        // `split`, not `lines`: an empty `///` line is a paragraph break and must stay.
        let text = text.value();
        let mut block: Vec<&str> = text.split('\n').map(str::trim_end).collect();
        if block.len() > 1 {
            strip_block_decoration(&mut block);
        }
        lines.extend(block.into_iter().map(|text| Line {
            text: text.to_owned(),
            span: attr.span(),
        }));
    }
    lines
}

/// A `/** .. */` comment's lines: without its blank first and last lines, and without the
/// ` * ` that starts every line when it is written that way (as rustdoc does).
fn strip_block_decoration(block: &mut Vec<&str>) {
    if block.first().is_some_and(|line| line.trim().is_empty()) {
        block.remove(0);
    }
    if block.last().is_some_and(|line| line.trim().is_empty()) {
        block.pop();
    }
    let decorated = block.iter().all(|line| line.trim_start().starts_with('*'));
    if decorated && !block.is_empty() {
        for line in block.iter_mut() {
            let rest = &line.trim_start()[1..];
            *line = rest.strip_prefix(' ').unwrap_or(rest);
        }
    }
}

/// Removes the indentation common to all non-blank lines (as rustdoc does), which also drops
/// the space after `///`. Leading `*` decorations of `/** */` comments are kept as written.
fn unindent(mut lines: Vec<Line>) -> Vec<Line> {
    let indent = lines
        .iter()
        .filter(|line| !line.text.trim().is_empty())
        .map(|line| line.text.len() - line.text.trim_start().len())
        .min()
        .unwrap_or(0);
    for line in &mut lines {
        // Every non-blank line has at least `indent` leading whitespace bytes, all ASCII or
        // not; trim by characters so a non-ASCII whitespace can never split a char.
        let mut removed = 0;
        let text: String = line
            .text
            .chars()
            .skip_while(|c| {
                let skip = removed < indent && c.is_whitespace();
                if skip {
                    removed += c.len_utf8();
                }
                skip
            })
            .collect();
        line.text = text;
    }
    lines
}

/// The title of a Markdown ATX heading (`# Title`, up to three spaces of indentation).
fn heading(line: &str) -> Option<&str> {
    let stripped = line.trim_start_matches(' ');
    if line.len() - stripped.len() > 3 {
        return None;
    }
    let title = stripped.trim_start_matches('#');
    let level = stripped.len() - title.len();
    if !(1..=6).contains(&level) {
        return None;
    }
    if title.is_empty() {
        return Some("");
    }
    title
        .strip_prefix([' ', '\t'])
        .map(|title| title.trim().trim_end_matches('#').trim())
}

/// Whether a (trimmed) line starts a Markdown list item.
fn is_list_item(line: &str) -> bool {
    if ["- ", "* ", "+ "]
        .iter()
        .any(|marker| line.starts_with(marker))
    {
        return true;
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && (line[digits..].starts_with(". ") || line[digits..].starts_with(") "))
}

/// Joins soft-wrapped lines with a space; keeps blank-line paragraph breaks, list items and
/// fenced code on their own lines; trims the ends.
fn reflow(lines: &[&str]) -> String {
    let mut out = String::new();
    let mut blank_before = false;
    let mut in_fence = false;
    let mut after_fence = false;
    for line in lines {
        let trimmed = line.trim();
        let fence_marker = trimmed.starts_with("```") || trimmed.starts_with("~~~");
        if in_fence {
            out.push('\n');
            out.push_str(line);
            in_fence = !fence_marker;
            after_fence = fence_marker;
            continue;
        }
        if trimmed.is_empty() {
            blank_before = true;
            continue;
        }
        if !out.is_empty() {
            if blank_before {
                out.push_str("\n\n");
            } else if fence_marker
                || after_fence
                || is_list_item(trimmed)
                || line.starts_with("    ")
            {
                out.push('\n');
            } else {
                out.push(' ');
            }
        }
        blank_before = false;
        after_fence = false;
        if fence_marker {
            out.push_str(line);
            in_fence = true;
        } else if line.starts_with("    ") {
            out.push_str(line);
        } else {
            out.push_str(trimmed);
        }
    }
    out
}

fn parse_arguments(lines: &[&Line]) -> Vec<ArgumentDoc> {
    let mut entries: Vec<ArgumentDoc> = Vec::new();
    // The indentation of the list's own items; deeper lines are nested in an entry.
    let mut item_indent: Option<usize> = None;
    // Whether the last entry takes continuation lines (free text after a blank line ends it).
    let mut open = false;
    let mut blank_before = false;
    for line in lines {
        let indent = line.text.len() - line.text.trim_start().len();
        let trimmed = line.text.trim();
        if trimmed.is_empty() {
            blank_before = true;
            continue;
        }
        let top_level = item_indent.is_none_or(|item| indent <= item);
        if top_level && let Some((name, text)) = argument_item(trimmed) {
            item_indent.get_or_insert(indent);
            entries.push(ArgumentDoc {
                name,
                text,
                span: line.span,
            });
            open = true;
        } else if open
            && (!blank_before || !top_level)
            && let Some(entry) = entries.last_mut()
        {
            if !entry.text.is_empty() {
                entry
                    .text
                    .push(if is_list_item(trimmed) { '\n' } else { ' ' });
            }
            entry.text.push_str(trimmed);
        } else {
            open = false;
        }
        blank_before = false;
    }
    entries
}

/// `* \`name\` - text`, `- \`name\`: text` or `* name - text`: the name and the text.
fn argument_item(line: &str) -> Option<(String, String)> {
    let rest = ["* ", "- ", "+ "]
        .iter()
        .find_map(|marker| line.strip_prefix(marker))?
        .trim_start();
    let (name, rest, quoted) = if let Some(quoted) = rest.strip_prefix('`') {
        let end = quoted.find('`')?;
        (quoted[..end].trim(), &quoted[end + 1..], true)
    } else {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '#'))
            .unwrap_or(rest.len());
        (&rest[..end], &rest[end..], false)
    };
    let name = name.strip_prefix("r#").unwrap_or(name);
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let rest = rest.trim_start();
    let text = if rest.is_empty() {
        ""
    } else if let Some(text) = ["-", ":", "–", "—"]
        .iter()
        .find_map(|separator| rest.strip_prefix(separator))
    {
        text
    } else if quoted {
        rest
    } else {
        return None;
    };
    Some((name.to_owned(), text.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Docs {
        let attrs: Vec<Attribute> = text
            .lines()
            .map(|line| {
                let line = if line.is_empty() {
                    String::new()
                } else {
                    format!(" {line}")
                };
                syn::parse_quote!(#[doc = #line])
            })
            .collect();
        parse(&attrs)
    }

    fn arguments(docs: &Docs) -> Vec<(&str, &str)> {
        docs.arguments
            .iter()
            .map(|entry| (entry.name.as_str(), entry.text.as_str()))
            .collect()
    }

    #[test]
    fn description_is_the_text_before_the_first_heading_reflowed() {
        let docs = docs(
            "Get the current weather\nfor a location.\n\nUse it for forecasts too.\n\n# Arguments\n* `location` - City",
        );
        assert_eq!(
            docs.description,
            "Get the current weather for a location.\n\nUse it for forecasts too."
        );
    }

    #[test]
    fn all_documented_argument_forms_are_read() {
        let docs = docs(
            "Tool.\n\n# Arguments\n\n* `location` - City and state,\n  e.g. San Francisco, CA\n- `unit`: Temperature unit\n* days - How many days\n+ `r#type` — Kind\n\n# Errors\n* `nope` - not an argument",
        );
        assert_eq!(
            arguments(&docs),
            [
                ("location", "City and state, e.g. San Francisco, CA"),
                ("unit", "Temperature unit"),
                ("days", "How many days"),
                ("type", "Kind"),
            ]
        );
    }

    #[test]
    fn nested_lists_stay_inside_their_entry() {
        let docs = docs(
            "Tool.\n\n## Args\n* `unit` - One of:\n  - `celsius`: metric\n  - `fahrenheit`: imperial\n* `days` - Days",
        );
        assert_eq!(
            arguments(&docs),
            [
                (
                    "unit",
                    "One of:\n- `celsius`: metric\n- `fahrenheit`: imperial"
                ),
                ("days", "Days"),
            ]
        );
    }

    #[test]
    fn headings_inside_code_fences_are_not_sections() {
        let docs = docs("Tool.\n\n```\n# not a heading\n```\nMore.\n# Examples\nx");
        assert_eq!(
            docs.description,
            "Tool.\n\n```\n# not a heading\n```\nMore."
        );
    }

    #[test]
    fn free_text_after_a_blank_line_ends_an_entry() {
        let docs = docs("Tool.\n# Arguments\n* `a` - A\n\nAll arguments are optional.");
        assert_eq!(arguments(&docs), [("a", "A")]);
    }

    #[test]
    fn block_comments_lose_their_star_decoration() {
        let attrs: Vec<Attribute> = vec![syn::parse_quote!(
            #[doc = "\n * Get the weather\n * for a city.\n *\n * # Arguments\n * * `city` - The city\n "]
        )];
        let docs = parse(&attrs);
        assert_eq!(docs.description, "Get the weather for a city.");
        assert_eq!(arguments(&docs), [("city", "The city")]);
    }

    #[test]
    fn list_items_in_the_description_keep_their_lines() {
        let docs = docs("Does:\n- one\n- two\nthings");
        assert_eq!(docs.description, "Does:\n- one\n- two things");
    }
}

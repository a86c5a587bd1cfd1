//! Reading a server's refusal of a request field the client chose: which refusals the client
//! works around by itself (`stream_options`), and which it explains (the token-limit field).

use crate::{LlmError, MaxTokensField};

/// Whether `error` is the server refusing `stream_options`: a 400 (or a 422, as FastAPI-based
/// servers answer unknown fields) whose message names it. A refusal whose status was lost (an
/// error body that is not OpenAI's, as async-openai reports it) counts too.
pub(crate) fn refuses_stream_options(error: &LlmError) -> bool {
    matches!(
        error,
        LlmError::Api { status: Some(400 | 422) | None, message, .. } if message.contains("stream_options")
    )
}

/// `error`, with a hint at the setting to change when it is the server refusing the field the
/// token limit went in (`sent`).
pub(crate) fn explain(error: LlmError, sent: Option<MaxTokensField>) -> LlmError {
    let LlmError::Api {
        status: status @ (Some(400 | 422) | None),
        message,
        retry_after,
    } = error
    else {
        return error;
    };
    let hint = match sent {
        // OpenAI: "Unsupported parameter: 'max_tokens' is not supported with this model. Use
        // 'max_completion_tokens' instead."
        Some(MaxTokensField::MaxTokens)
            if message.contains("max_tokens")
                && (message.contains("max_completion_tokens")
                    || message.to_ascii_lowercase().contains("unsupported")
                    || message.contains("not supported")) =>
        {
            Some(
                "this model wants `max_completion_tokens`: set \
                 `max_tokens_field(MaxTokensField::MaxCompletionTokens)` on the client's builder \
                 (or `RequestOptions::max_tokens_field`)",
            )
        }
        // Servers that know only `max_tokens` name the field they do not know.
        Some(MaxTokensField::MaxCompletionTokens) if message.contains("max_completion_tokens") => {
            Some(
                "this server does not take `max_completion_tokens`: set \
                 `max_tokens_field(MaxTokensField::MaxTokens)` on the client's builder \
                 (or `RequestOptions::max_tokens_field`)",
            )
        }
        _ => None,
    };
    let message = match hint {
        Some(hint) => format!("{message} ({hint})"),
        None => message,
    };
    LlmError::Api {
        status,
        message,
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, message: &str) -> LlmError {
        LlmError::Api {
            status: Some(status),
            message: message.to_owned(),
            retry_after: None,
        }
    }

    fn message(error: LlmError) -> String {
        match error {
            LlmError::Api { message, .. } => message,
            other => panic!("not an API error: {other:?}"),
        }
    }

    #[test]
    fn a_refused_max_tokens_names_the_setting_to_change() {
        let openai = "Unsupported parameter: 'max_tokens' is not supported with this model. \
                      Use 'max_completion_tokens' instead.";
        let explained = message(explain(api(400, openai), Some(MaxTokensField::MaxTokens)));
        assert!(explained.starts_with(openai), "{explained}");
        assert!(
            explained.contains("MaxTokensField::MaxCompletionTokens"),
            "{explained}"
        );

        let vllm = "extra fields not permitted: max_completion_tokens";
        let explained = message(explain(
            api(400, vllm),
            Some(MaxTokensField::MaxCompletionTokens),
        ));
        assert!(
            explained.contains("MaxTokensField::MaxTokens)"),
            "{explained}"
        );
    }

    #[test]
    fn other_errors_are_left_as_they_are() {
        // A limit too high names `max_tokens` too, but switching fields would not help.
        let too_high = "max_tokens is too large: 100000. This model supports at most 4096";
        assert_eq!(
            message(explain(api(400, too_high), Some(MaxTokensField::MaxTokens))),
            too_high
        );
        let openai = "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens'.";
        assert_eq!(message(explain(api(400, openai), None)), openai);
        assert_eq!(
            message(explain(api(500, openai), Some(MaxTokensField::MaxTokens))),
            openai
        );
        assert!(matches!(
            explain(LlmError::MissingApiKey, Some(MaxTokensField::MaxTokens)),
            LlmError::MissingApiKey
        ));
    }

    #[test]
    fn only_a_client_error_naming_stream_options_is_a_refusal_of_it() {
        assert!(refuses_stream_options(&api(
            400,
            "Unrecognized request argument supplied: stream_options"
        )));
        assert!(refuses_stream_options(&api(
            422,
            "extra fields not permitted: stream_options"
        )));
        assert!(!refuses_stream_options(&api(400, "invalid model")));
        // async-openai loses the status of an error body that is not OpenAI's.
        assert!(refuses_stream_options(&LlmError::Api {
            status: None,
            message: "extra fields not permitted: stream_options".to_owned(),
            retry_after: None,
        }));
        assert!(!refuses_stream_options(&api(
            500,
            "stream_options broke us"
        )));
    }
}

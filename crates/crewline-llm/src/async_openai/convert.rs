//! Conversions between crewline's requests and async-openai's, both ways, so a team can build
//! a crewline request from its own and back.
//!
//! crewline's side is text only (the voice path): what it cannot hold (image, audio or file
//! parts, custom tools, an allowed-tools choice, the deprecated `function` role) fails with a
//! [`ConversionError`] instead of being dropped. The fields both sides type (`seed`, `user`,
//! `metadata`, `response_format`, `parallel_tool_calls`, the token limit in `max_tokens` or
//! `max_completion_tokens`) map typed; the rest of async-openai's (`top_p`, `stop`...)
//! travel in [`RequestOptions::extra`]; `stream` and `stream_options` are the client's to set
//! and are not carried.

use std::sync::Arc;

use ::async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls, ChatCompletionNamedToolChoice,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestAssistantMessageContentPart, ChatCompletionRequestDeveloperMessageContent,
    ChatCompletionRequestDeveloperMessageContentPart, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessage, ChatCompletionRequestSystemMessageContent,
    ChatCompletionRequestSystemMessageContentPart, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestToolMessageContentPart,
    ChatCompletionRequestUserMessage, ChatCompletionRequestUserMessageContent,
    ChatCompletionRequestUserMessageContentPart, ChatCompletionTool,
    ChatCompletionToolChoiceOption, ChatCompletionTools, CreateChatCompletionRequest, FunctionCall,
    FunctionName, FunctionObject, ToolChoiceOptions,
};
use crewline_core::{Message, ToolCall, ToolDefinition};
use serde_json::{Map, Value};

use crate::{
    ChatRequest, LlmError, MaxTokensField, RequestOptions, ToolChoice, openai::build_body,
};

/// Why an async-openai request (or part of one) has no crewline equivalent, or a crewline
/// request no async-openai one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConversionError {
    /// A message holds a part crewline's text messages cannot (an image, audio, a file).
    #[error("a {role} message holds a {part} part; crewline messages are text only")]
    NonTextContent {
        /// The message's role.
        role: &'static str,
        /// The kind of part.
        part: &'static str,
    },
    /// A custom (free-form input) tool, tool call or tool choice: crewline's tools are
    /// functions.
    #[error("custom tool {0:?}: crewline's tools are functions with JSON arguments")]
    CustomTool(String),
    /// An `allowed_tools` tool choice, which crewline's [`ToolChoice`] cannot say.
    #[error("an allowed_tools tool choice has no crewline equivalent")]
    AllowedTools,
    /// A message of the deprecated `function` role (use `tool` messages).
    #[error("a message of the deprecated function role has no crewline equivalent")]
    FunctionMessage,
    /// The crewline request could not be written as async-openai's (no model, a temperature
    /// that is no number, an extra option of the wrong type).
    #[error("the request cannot be written as async-openai's")]
    Request(#[source] LlmError),
    /// An extra option async-openai's request has no field for (it would be dropped).
    #[error("the extra option {0:?} has no field in async-openai's request")]
    UnknownOption(String),
    /// The request's JSON did not fit async-openai's types.
    #[error("the request does not fit async-openai's types")]
    Json(#[from] serde_json::Error),
}

/// The async-openai function tool for a crewline tool definition.
pub fn function_tool(tool: &ToolDefinition) -> ChatCompletionTool {
    {
        ChatCompletionTool {
            function: FunctionObject {
                name: tool.name.clone(),
                description: (!tool.description.is_empty()).then(|| tool.description.clone()),
                parameters: Some(tool.parameters.clone()),
                // Unset rather than `false` when not strict, as the default client's body.
                strict: tool.strict.then_some(true),
            },
        }
    }
}

/// The async-openai tool (a function) for a crewline tool definition.
pub fn tool(tool: &ToolDefinition) -> ChatCompletionTools {
    ChatCompletionTools::Function(function_tool(tool))
}

/// The crewline tool definition of an async-openai function tool.
pub fn crewline_function_tool(tool: ChatCompletionTool) -> ToolDefinition {
    {
        let function = tool.function;
        ToolDefinition {
            name: function.name,
            description: function.description.unwrap_or_default(),
            // No `parameters` is a function without parameters.
            parameters: function
                .parameters
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
            strict: function.strict.unwrap_or(false),
        }
    }
}

/// The crewline tool definition of an async-openai tool; a custom tool fails.
pub fn crewline_tool(tool: ChatCompletionTools) -> Result<ToolDefinition, ConversionError> {
    {
        match tool {
            ChatCompletionTools::Function(tool) => Ok(crewline_function_tool(tool)),
            ChatCompletionTools::Custom(tool) => Err(ConversionError::CustomTool(tool.custom.name)),
        }
    }
}

impl From<&ToolChoice> for ChatCompletionToolChoiceOption {
    fn from(choice: &ToolChoice) -> Self {
        match choice {
            ToolChoice::Auto => Self::Mode(ToolChoiceOptions::Auto),
            ToolChoice::None => Self::Mode(ToolChoiceOptions::None),
            ToolChoice::Required => Self::Mode(ToolChoiceOptions::Required),
            ToolChoice::Function(name) => Self::Function(ChatCompletionNamedToolChoice {
                function: FunctionName { name: name.clone() },
            }),
        }
    }
}

impl TryFrom<ChatCompletionToolChoiceOption> for ToolChoice {
    type Error = ConversionError;

    fn try_from(choice: ChatCompletionToolChoiceOption) -> Result<Self, Self::Error> {
        Ok(match choice {
            ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::Auto) => Self::Auto,
            ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::None) => Self::None,
            ChatCompletionToolChoiceOption::Mode(ToolChoiceOptions::Required) => Self::Required,
            ChatCompletionToolChoiceOption::Function(named) => Self::Function(named.function.name),
            ChatCompletionToolChoiceOption::Custom(named) => {
                return Err(ConversionError::CustomTool(named.custom.name));
            }
            ChatCompletionToolChoiceOption::AllowedTools(_) => {
                return Err(ConversionError::AllowedTools);
            }
        })
    }
}

/// The async-openai tool call (a function call) for a crewline one.
pub fn tool_call(call: &ToolCall) -> ChatCompletionMessageToolCalls {
    {
        ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
            id: call.id.clone(),
            function: FunctionCall {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
        })
    }
}

/// The crewline tool call of an async-openai one; a custom tool call fails.
pub fn crewline_tool_call(
    call: ChatCompletionMessageToolCalls,
) -> Result<ToolCall, ConversionError> {
    {
        match call {
            ChatCompletionMessageToolCalls::Function(call) => Ok(ToolCall::new(
                call.id,
                call.function.name,
                call.function.arguments,
            )),
            ChatCompletionMessageToolCalls::Custom(call) => {
                Err(ConversionError::CustomTool(call.custom_tool.name))
            }
        }
    }
}

/// The async-openai message for a crewline one.
pub fn message(message: &Message) -> ChatCompletionRequestMessage {
    {
        use ChatCompletionRequestMessage as M;
        match message {
            Message::System { content } => M::System(ChatCompletionRequestSystemMessage {
                content: ChatCompletionRequestSystemMessageContent::Text(content.clone()),
                name: None,
            }),
            Message::User { content } => M::User(ChatCompletionRequestUserMessage {
                content: ChatCompletionRequestUserMessageContent::Text(content.clone()),
                name: None,
            }),
            Message::Assistant {
                content,
                tool_calls,
            } => M::Assistant(ChatCompletionRequestAssistantMessage {
                content: content
                    .clone()
                    .map(ChatCompletionRequestAssistantMessageContent::Text),
                tool_calls: (!tool_calls.is_empty())
                    .then(|| tool_calls.iter().map(tool_call).collect()),
                ..ChatCompletionRequestAssistantMessage::default()
            }),
            Message::Tool {
                tool_call_id,
                content,
            } => M::Tool(ChatCompletionRequestToolMessage {
                content: ChatCompletionRequestToolMessageContent::Text(content.clone()),
                tool_call_id: tool_call_id.clone(),
            }),
        }
    }
}

/// The crewline message of an async-openai one; non-text parts and the `function` role fail.
pub fn crewline_message(message: ChatCompletionRequestMessage) -> Result<Message, ConversionError> {
    {
        use ChatCompletionRequestMessage as M;
        Ok(match message {
            // crewline reads a developer message as a system one, as on the wire.
            M::Developer(m) => Message::system(match m.content {
                ChatCompletionRequestDeveloperMessageContent::Text(text) => text,
                ChatCompletionRequestDeveloperMessageContent::Array(parts) => parts
                    .into_iter()
                    .map(|ChatCompletionRequestDeveloperMessageContentPart::Text(p)| p.text)
                    .collect(),
            }),
            M::System(m) => Message::system(match m.content {
                ChatCompletionRequestSystemMessageContent::Text(text) => text,
                ChatCompletionRequestSystemMessageContent::Array(parts) => parts
                    .into_iter()
                    .map(|ChatCompletionRequestSystemMessageContentPart::Text(p)| p.text)
                    .collect(),
            }),
            M::User(m) => Message::user(user_text(m.content)?),
            M::Assistant(m) => Message::Assistant {
                content: m.content.map(|content| match content {
                    ChatCompletionRequestAssistantMessageContent::Text(text) => text,
                    ChatCompletionRequestAssistantMessageContent::Array(parts) => parts
                        .into_iter()
                        .map(|part| match part {
                            ChatCompletionRequestAssistantMessageContentPart::Text(p) => p.text,
                            ChatCompletionRequestAssistantMessageContentPart::Refusal(p) => {
                                p.refusal
                            }
                        })
                        .collect(),
                }),
                tool_calls: m
                    .tool_calls
                    .unwrap_or_default()
                    .into_iter()
                    .map(crewline_tool_call)
                    .collect::<Result<_, _>>()?,
            },
            M::Tool(m) => Message::tool(
                m.tool_call_id,
                match m.content {
                    ChatCompletionRequestToolMessageContent::Text(text) => text,
                    ChatCompletionRequestToolMessageContent::Array(parts) => parts
                        .into_iter()
                        .map(|ChatCompletionRequestToolMessageContentPart::Text(p)| p.text)
                        .collect(),
                },
            ),
            M::Function(_) => return Err(ConversionError::FunctionMessage),
        })
    }
}

/// A user message's text; any part that is not text fails.
fn user_text(content: ChatCompletionRequestUserMessageContent) -> Result<String, ConversionError> {
    use ChatCompletionRequestUserMessageContentPart as Part;
    match content {
        ChatCompletionRequestUserMessageContent::Text(text) => Ok(text),
        ChatCompletionRequestUserMessageContent::Array(parts) => parts
            .into_iter()
            .map(|part| match part {
                Part::Text(p) => Ok(p.text),
                Part::ImageUrl(_) => Err("image"),
                Part::InputAudio(_) => Err("audio"),
                Part::File(_) => Err("file"),
            })
            .collect::<Result<String, _>>()
            .map_err(|part| ConversionError::NonTextContent { role: "user", part }),
    }
}

/// The fields of async-openai's request that crewline's own fields carry (the rest go in
/// `extra`), and those that are the client's to set.
const OWN_FIELDS: [&str; 15] = [
    "model",
    "messages",
    "tools",
    "tool_choice",
    "temperature",
    "max_tokens",
    "max_completion_tokens",
    "parallel_tool_calls",
    "response_format",
    "seed",
    "user",
    "metadata",
    "stream",
    "stream_options",
    // Deprecated and never sent by crewline; refused by `crewline_message` if used.
    "function_call",
];

/// The async-openai request crewline would send for `request` (not streamed): the same JSON
/// the default client writes, read into async-openai's types. The model must be set in the
/// request's options; a `tool_choice` without tools is left out, as on the wire.
impl TryFrom<&ChatRequest> for CreateChatCompletionRequest {
    type Error = ConversionError;

    fn try_from(request: &ChatRequest) -> Result<Self, Self::Error> {
        let body = build_body(&RequestOptions::default(), request, false)
            .map_err(ConversionError::Request)?;
        let mut typed: Self = serde_json::from_slice(&body)?;
        // Written as `false` by the body; unset here, so a caller's `create_stream` sets it.
        typed.stream = None;
        // A field async-openai does not know would be silently dropped by serde: say so.
        if !request.options.extra.is_empty() {
            let known = serde_json::to_value(&typed)?;
            if let Some(unknown) = request
                .options
                .extra
                .iter()
                .find(|(key, value)| !value.is_null() && known.get(key.as_str()).is_none())
            {
                return Err(ConversionError::UnknownOption(unknown.0.clone()));
            }
        }
        Ok(typed)
    }
}

impl TryFrom<CreateChatCompletionRequest> for ChatRequest {
    type Error = ConversionError;

    fn try_from(mut request: CreateChatCompletionRequest) -> Result<Self, Self::Error> {
        let messages = std::mem::take(&mut request.messages)
            .into_iter()
            .map(crewline_message)
            .collect::<Result<Vec<_>, _>>()?;
        let tools: Arc<[ToolDefinition]> = request
            .tools
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(crewline_tool)
            .collect::<Result<_, _>>()?;
        let tool_choice = request
            .tool_choice
            .take()
            .map(ToolChoice::try_from)
            .transpose()?;
        // Read before the typed fields are taken out: what is left is `extra`.
        let extra = extra_fields(&request)?;
        // async-openai marks `max_tokens`, `seed` and `user` deprecated; servers still read them.
        #[allow(deprecated)]
        let (max_tokens, seed, user) = (
            request.max_tokens.take(),
            request.seed.take(),
            request.user.take(),
        );
        // The field the limit came in is the field it goes back out in.
        let (max_tokens, max_tokens_field) = match (max_tokens, request.max_completion_tokens) {
            // `max_tokens` is where the limit goes when no field is chosen.
            (Some(limit), _) => (Some(limit), None),
            (None, Some(limit)) => (Some(limit), Some(MaxTokensField::MaxCompletionTokens)),
            (None, None) => (None, None),
        };
        let response_format = request
            .response_format
            .take()
            .map(|format| serde_json::to_value(format).and_then(serde_json::from_value))
            .transpose()?;
        let metadata = match request
            .metadata
            .take()
            .map(serde_json::to_value)
            .transpose()?
        {
            Some(Value::Object(map)) => Some(map),
            _ => None,
        };
        let options = RequestOptions {
            model: Some(std::mem::take(&mut request.model)).filter(|m| !m.is_empty()),
            temperature: request.temperature.take(),
            max_tokens,
            max_tokens_field,
            parallel_tool_calls: request.parallel_tool_calls,
            response_format,
            seed,
            user,
            metadata,
            extra,
            ..RequestOptions::default()
        };
        Ok(ChatRequest {
            messages: messages.into(),
            tools,
            tool_choice,
            options,
        })
    }
}

/// The request's set fields that crewline has no field of its own for.
fn extra_fields(
    request: &CreateChatCompletionRequest,
) -> Result<Map<String, Value>, ConversionError> {
    let Value::Object(fields) = serde_json::to_value(request)? else {
        return Ok(Map::new());
    };
    Ok(fields
        .into_iter()
        .filter(|(key, value)| !value.is_null() && !OWN_FIELDS.contains(&key.as_str()))
        .collect())
}

#[cfg(test)]
mod tests {
    use ::async_openai::types::chat::{
        ChatCompletionRequestMessageContentPartImage, ChatCompletionRequestMessageContentPartText,
        CreateChatCompletionRequestArgs, ImageUrl,
    };
    use serde_json::json;

    use super::*;

    fn weather() -> ToolDefinition {
        ToolDefinition::new(
            "get_weather",
            "The weather in a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        )
    }

    fn conversation() -> Vec<Message> {
        vec![
            Message::system("You are a weather line."),
            Message::user("Weather in Oslo?"),
            Message::assistant_with_tools(
                "",
                vec![ToolCall::new("call_1", "get_weather", r#"{"city":"Oslo"}"#)],
            ),
            Message::tool("call_1", r#"{"temp_c":4}"#),
            Message::assistant("4 degrees in Oslo."),
        ]
    }

    #[test]
    fn a_crewline_request_goes_to_async_openai_and_back_unchanged() {
        let mut extra = Map::new();
        extra.insert("top_p".into(), json!(0.5));
        let mut metadata = Map::new();
        metadata.insert("call".into(), json!("c-7"));
        let request = ChatRequest::new(conversation())
            .with_tools(vec![weather()])
            .with_tool_choice(ToolChoice::Function("get_weather".into()))
            .with_options(RequestOptions {
                model: Some("gpt-4o-mini".into()),
                temperature: Some(0.25),
                max_tokens: Some(120),
                seed: Some(7),
                user: Some("caller-7".into()),
                parallel_tool_calls: Some(false),
                metadata: Some(metadata),
                response_format: Some(crate::ResponseFormat::JsonObject),
                extra,
                ..RequestOptions::default()
            });

        let typed = CreateChatCompletionRequest::try_from(&request).expect("converts");
        assert_eq!(typed.model, "gpt-4o-mini");
        assert_eq!(typed.messages.len(), 5);
        assert_eq!(typed.top_p, Some(0.5));
        assert_eq!(typed.parallel_tool_calls, Some(false));
        #[allow(deprecated)] // async-openai's deprecation; servers still read `seed`.
        let seed = typed.seed;
        assert_eq!(seed, Some(7));
        assert_eq!(typed.stream, None);
        let back = ChatRequest::try_from(typed).expect("converts back");

        assert_eq!(back, request);
    }

    #[test]
    fn an_async_openai_request_comes_to_crewline_and_back_unchanged() {
        let typed = CreateChatCompletionRequestArgs::default()
            .model("gpt-4o")
            .messages(conversation().iter().map(message).collect::<Vec<_>>())
            .tools(vec![tool(&weather())])
            .tool_choice(ChatCompletionToolChoiceOption::Mode(
                ToolChoiceOptions::Required,
            ))
            .temperature(0.5)
            .top_p(0.5)
            .user("caller-7")
            .seed(11)
            .parallel_tool_calls(true)
            .max_completion_tokens(256u32)
            .build()
            .expect("a request");

        let request = ChatRequest::try_from(typed.clone()).expect("converts");
        assert_eq!(request.tool_choice, Some(ToolChoice::Required));
        // The fields both sides type arrive typed, not as extras.
        let options = &request.options;
        assert_eq!(options.user.as_deref(), Some("caller-7"));
        assert_eq!(options.seed, Some(11));
        assert_eq!(options.parallel_tool_calls, Some(true));
        assert_eq!(options.max_tokens, Some(256));
        assert_eq!(
            options.max_tokens_field,
            Some(MaxTokensField::MaxCompletionTokens)
        );
        assert_eq!(options.extra.len(), 1, "{:?}", options.extra);
        assert_eq!(options.extra.get("top_p"), Some(&json!(0.5)));
        let again = CreateChatCompletionRequest::try_from(&request).expect("converts back");

        assert_eq!(again, typed);
    }

    #[test]
    fn tool_choices_and_tools_convert_both_ways() {
        for choice in [
            ToolChoice::Auto,
            ToolChoice::None,
            ToolChoice::Required,
            ToolChoice::Function("hang_up".into()),
        ] {
            let typed = ChatCompletionToolChoiceOption::from(&choice);
            // The same JSON the default client sends.
            assert_eq!(
                serde_json::to_value(&typed).expect("json"),
                choice.to_openai()
            );
            assert_eq!(ToolChoice::try_from(typed).expect("back"), choice);
        }
        let tool = tool(&weather());
        assert_eq!(
            serde_json::to_value(&tool).expect("json"),
            weather().to_openai()
        );
        assert_eq!(crewline_tool(tool).expect("back"), weather());
    }

    #[test]
    fn strict_tools_convert_both_ways_and_plain_ones_stay_unset() {
        let strict = weather().with_strict(true);
        let typed = function_tool(&strict);
        assert_eq!(typed.function.strict, Some(true));
        assert_eq!(
            serde_json::to_value(tool(&strict)).expect("json"),
            strict.to_openai(),
            "the JSON the default client sends"
        );
        assert_eq!(crewline_function_tool(typed), strict);

        let plain = function_tool(&weather());
        assert_eq!(plain.function.strict, None);
        assert_eq!(crewline_function_tool(plain), weather());

        // A request with a strict tool reaches async-openai's types with the flag, and back.
        let request = ChatRequest::new(conversation())
            .with_tools(vec![strict.clone(), weather()])
            .with_options(RequestOptions {
                model: Some("gpt-4o-mini".into()),
                ..RequestOptions::default()
            });
        let typed = CreateChatCompletionRequest::try_from(&request).expect("to async-openai");
        let back = ChatRequest::try_from(typed).expect("back");
        assert_eq!(back.tools.to_vec(), vec![strict, weather()]);
    }

    #[test]
    fn what_crewline_cannot_hold_fails_with_a_typed_error() {
        let image = ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
            content: ChatCompletionRequestUserMessageContent::Array(vec![
                ChatCompletionRequestUserMessageContentPart::Text(
                    ChatCompletionRequestMessageContentPartText {
                        text: "What is this?".into(),
                    },
                ),
                ChatCompletionRequestUserMessageContentPart::ImageUrl(
                    ChatCompletionRequestMessageContentPartImage {
                        image_url: ImageUrl {
                            url: "https://example.invalid/cat.png".into(),
                            detail: None,
                        },
                    },
                ),
            ]),
            name: None,
        });
        assert!(matches!(
            crewline_message(image),
            Err(ConversionError::NonTextContent {
                role: "user",
                part: "image"
            })
        ));
        let allowed = ChatCompletionToolChoiceOption::AllowedTools(
            ::async_openai::types::chat::ChatCompletionAllowedToolsChoice {
                allowed_tools: Vec::new(),
            },
        );
        assert!(matches!(
            ToolChoice::try_from(allowed),
            Err(ConversionError::AllowedTools)
        ));

        let no_model = ChatRequest::new(vec![Message::user("Hi")]);
        assert!(matches!(
            CreateChatCompletionRequest::try_from(&no_model),
            Err(ConversionError::Request(LlmError::Config(_)))
        ));
        let mut extra = Map::new();
        extra.insert("x_vendor_cache".into(), json!(true));
        let vendor = ChatRequest::new(vec![Message::user("Hi")]).with_options(RequestOptions {
            model: Some("m".into()),
            extra,
            ..RequestOptions::default()
        });
        assert!(matches!(
            CreateChatCompletionRequest::try_from(&vendor),
            Err(ConversionError::UnknownOption(key)) if key == "x_vendor_cache"
        ));
    }

    #[test]
    fn text_parts_are_joined_and_developer_reads_as_system() {
        let typed: Vec<ChatCompletionRequestMessage> = serde_json::from_value(json!([
            {"role": "developer", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        ]))
        .expect("messages");
        let messages: Vec<Message> = typed
            .into_iter()
            .map(crewline_message)
            .collect::<Result<_, _>>()
            .expect("converts");
        assert_eq!(
            messages,
            vec![Message::system("Be brief."), Message::user("Hi")]
        );
    }
}

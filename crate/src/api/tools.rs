//! Tool calling (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`, assistant `tool_calls`
//! and `role: "tool"` messages), in the model's own format where its chat template has one
//! ([`Dialect::Hermes`]: Qwen2.5, Qwen3, Hermes; [`Dialect::Llama3`]: Llama 3.1-3.3), else in
//! radixlm's generic format ([`Dialect::Generic`]), which any chat template renders:
//!
//! - The tools go first in the system message, so conversations with the same tools share
//!   those pages (the request's own system message follows them): a short instruction, then
//!   `<tools>[…the tools as OpenAI's JSON…]</tools>`.
//! - A call is the whole reply, `<tool_call>[\n{"name": "f", "arguments": {…}},\n…\n]</tool_call>`
//!   (the format SmolLM2 was tuned on), each call's arguments held to its function's JSON Schema
//!   by the grammar (an arguments schema that does not say otherwise takes no properties
//!   beyond its own). With `tool_choice: "auto"` the reply is calls or text, and text then may
//!   not start with `<` or whitespace.
//! - Tool results go back as a user turn: `<tool_response>\n…\n</tool_response>` per result.
//!
//! In the model's own dialects the template renders the tools (OpenAI's objects), the calls sent
//! back (arguments as objects) and the results itself. In Hermes a reply's calls are one
//! `<tool_call>\n{"name": "f", "arguments": {…}}\n</tool_call>` block each, on lines of their own;
//! in Llama 3 a call is the whole reply, `{"name": "f", "parameters": {…}}`, one call a reply (the
//! template renders no more), and text under "auto" may not start with `{`.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tsify::Tsify;

use crate::engine::constraint::{single_line, ResponseFormat};
use crate::tokenizer::{ChatTemplate, Conversation, Message};

/// How a model is shown tools and writes its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// radixlm's format, in the system message, for any template.
    Generic,
    /// The template presents the tools itself (a `tools` variable) and calls are `<tool_call>`
    /// blocks of JSON (Qwen2.5, Qwen3, Hermes 2 Pro).
    Hermes,
    /// The template presents the tools itself, results come back in `ipython` turns, and a call
    /// is the reply's one JSON object with `parameters` (Llama 3.1, 3.2, 3.3).
    Llama3,
}

impl Dialect {
    /// The dialect of a model's chat template.
    pub fn of(template: Option<&ChatTemplate>) -> Self {
        match template {
            Some(t) if t.renders_tools() && t.source().contains(CALL_OPEN) => Self::Hermes,
            Some(t) if t.renders_tools() && t.source().contains(LLAMA3_RESULTS) => Self::Llama3,
            _ => Self::Generic,
        }
    }

    /// The dialect's name in the package's `ModelInfo.toolFormat`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Generic => "generic",
            Self::Hermes => "hermes",
            Self::Llama3 => "llama3",
        }
    }

    /// The text a reply of calls starts with (a text reply may not).
    pub fn call_opener(self) -> char {
        match self {
            Self::Generic | Self::Hermes => '<',
            Self::Llama3 => '{',
        }
    }

    /// The key of a call's arguments object.
    fn arguments_key(self) -> &'static str {
        match self {
            Self::Generic | Self::Hermes => "arguments",
            Self::Llama3 => "parameters",
        }
    }
}

/// OpenAI's `{ "type": "function", "function": { name, description, parameters, strict } }`.
#[derive(Deserialize, Debug, Clone, Tsify)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    #[serde(rename = "type")]
    #[tsify(type = "\"function\"")]
    pub kind: String,
    pub function: Function,
}

#[derive(Deserialize, Debug, Clone, Tsify)]
#[tsify(missing_as_null)]
#[serde(deny_unknown_fields)]
pub struct Function {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON Schema of the arguments object (none: no arguments).
    #[serde(default)]
    #[tsify(type = "Record<string, unknown>")]
    pub parameters: Option<Value>,
    /// Accepted for OpenAI's shape: the arguments always follow the schema here.
    #[serde(default)]
    pub strict: Option<bool>,
}

/// A message of the conversation in OpenAI's shape.
#[derive(Deserialize, Debug, Clone, PartialEq, Tsify)]
#[tsify(missing_as_null)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    #[tsify(type = "\"system\" | \"user\" | \"assistant\" | \"tool\"")]
    pub role: String,
    /// Null beside an assistant's `tool_calls`.
    #[serde(default)]
    #[tsify(type = "string | null")]
    pub content: Option<String>,
    /// An assistant's calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// A tool message: the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Deserialize, Debug, Clone, PartialEq, serde::Serialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    #[tsify(type = "\"function\"")]
    pub kind: String,
    pub function: CallFunction,
}

#[derive(Deserialize, Debug, Clone, PartialEq, serde::Serialize, Tsify)]
#[serde(deny_unknown_fields)]
pub struct CallFunction {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

impl Tool {
    /// OpenAI's object, as a template that presents tools receives it.
    fn to_json(&self) -> Value {
        let f = &self.function;
        let mut function = json!({ "name": f.name });
        if let Some(d) = &f.description {
            function["description"] = d.clone().into();
        }
        if let Some(p) = &f.parameters {
            function["parameters"] = p.clone();
        }
        json!({ "type": "function", "function": function })
    }
}

/// What a reply may be, as `tool_choice` says.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    Auto,
    /// Text only.
    None,
    /// One or more calls.
    Required,
    /// One call of this function.
    Function(String),
}

impl ToolChoice {
    /// OpenAI's `tool_choice` value, checked against the tools' names.
    pub fn from_json(value: Option<&Value>, tools: &[Tool]) -> Result<Self, String> {
        let Some(value) = value else { return Ok(if tools.is_empty() { Self::None } else { Self::Auto }) };
        let choice = match value {
            Value::String(s) if s == "auto" => Self::Auto,
            Value::String(s) if s == "none" => Self::None,
            Value::String(s) if s == "required" => Self::Required,
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") && o.len() == 2 => {
                let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
                Self::Function(name.ok_or("tool_choice.function must be { name }")?.to_string())
            }
            other => return Err(format!("tool_choice must be \"auto\", \"none\", \"required\" or {{ type: \"function\", function: {{ name }} }}, got {other}")),
        };
        match &choice {
            Self::Auto | Self::Required if tools.is_empty() => Err("tool_choice needs tools".into()),
            Self::Function(name) if !tools.iter().any(|t| &t.function.name == name) => Err(format!("tool_choice names {name:?}, which is not among the tools")),
            _ => Ok(choice),
        }
    }
}

/// The tools' checks: OpenAI's names (1-64 of a-z, A-Z, 0-9, _ and -), distinct, object schemas.
pub fn check_tools(tools: &[Tool]) -> Result<(), String> {
    for (i, tool) in tools.iter().enumerate() {
        let f = &tool.function;
        if tool.kind != "function" {
            return Err(format!("tools[{i}].type must be \"function\", got {:?}", tool.kind));
        }
        if f.name.is_empty() || f.name.len() > 64 || !f.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(format!("tools[{i}].function.name must be 1-64 letters, digits, _ or -, got {:?}", f.name));
        }
        if tools[..i].iter().any(|t| t.function.name == f.name) {
            return Err(format!("tools[{i}].function.name {:?} is given twice", f.name));
        }
        if let Some(p) = &f.parameters {
            if !p.is_object() {
                return Err(format!("tools[{i}].function.parameters must be a JSON Schema object"));
            }
        }
    }
    Ok(())
}

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";
/// Between two of the Hermes dialect's call blocks.
const BETWEEN_BLOCKS: &str = "</tool_call>\n<tool_call>";
/// The header of the turn in which Llama 3's templates give tool results back.
const LLAMA3_RESULTS: &str = "<|start_header_id|>ipython";

/// A function's arguments schema: none takes an empty object; an object schema that does not
/// say whether other properties are allowed allows none (as OpenAI's strict mode requires).
fn arguments_schema(f: &Function) -> Value {
    let mut schema = f.parameters.clone().unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
    if let Some(o) = schema.as_object_mut() {
        o.entry("additionalProperties").or_insert(false.into());
    }
    schema
}

/// The system text that presents the tools (independent of `tool_choice`, so requests that
/// choose differently still share its pages).
fn tools_preamble(tools: &[Tool]) -> String {
    let listed: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut f = json!({ "name": t.function.name });
            if let Some(d) = &t.function.description {
                f["description"] = d.clone().into();
            }
            f["parameters"] = arguments_schema(&t.function);
            json!({ "type": "function", "function": f })
        })
        .collect();
    format!(
        "You answer questions with the help of functions. When one or more of the functions below serve the question, \
         call them; when a call needs a value the question does not give, or no function fits, say so in text.\n\
         You have access to the following tools:\n<tools>{}</tools>\n\
         To call functions, reply with only this, each call's arguments of its parameters' types:\n\
         {CALL_OPEN}[\n{{\"name\": \"func_name1\", \"arguments\": {{\"argument1\": \"value1\"}}}},\n(more calls as needed)\n]{CALL_CLOSE}",
        serde_json::to_string(&listed).unwrap_or_default()
    )
}

/// Calls as the model writes them (what the grammar produces, so a reply's text and its calls
/// sent back render the same).
fn calls_text(calls: &[ToolCall]) -> String {
    let items: Vec<String> = calls.iter().map(|c| format!("{{\"name\": {}, \"arguments\": {}}}", json!(c.function.name), c.function.arguments)).collect();
    format!("{CALL_OPEN}[\n{}\n]{CALL_CLOSE}", items.join(",\n"))
}

/// The conversation as the chat template takes it, in `dialect`.
pub fn template_messages(tools: &[Tool], messages: &[ChatMessage], dialect: Dialect) -> Result<Conversation, String> {
    match dialect {
        Dialect::Generic => generic_messages(tools, messages).map(Conversation::from),
        Dialect::Hermes | Dialect::Llama3 => {
            let messages = messages.iter().enumerate().map(|(at, m)| template_message(at, m)).collect::<Result<_, _>>()?;
            Ok(Conversation { messages, tools: tools.iter().map(Tool::to_json).collect() })
        }
    }
}

/// A message for a template that renders calls and results itself: OpenAI's shape, a call's
/// arguments as an object.
fn template_message(at: usize, m: &ChatMessage) -> Result<Message, String> {
    check_message(at, m)?;
    let mut message = Message::new(m.role.clone(), m.content.clone().unwrap_or_default());
    if let Some(calls) = &m.tool_calls {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                let arguments: Value = serde_json::from_str(&c.function.arguments).unwrap_or_default();
                json!({ "id": c.id, "type": "function", "function": { "name": c.function.name, "arguments": arguments } })
            })
            .collect();
        message.tool_calls = Some(calls.into());
    }
    Ok(message)
}

/// The checks every dialect makes of a message: its role, its content where the role needs
/// one, calls only on an assistant's (each a function whose arguments are a JSON object as
/// text), a tool message's `tool_call_id`.
fn check_message(at: usize, m: &ChatMessage) -> Result<(), String> {
    if !matches!(m.role.as_str(), "system" | "user" | "assistant" | "tool") {
        return Err(format!("messages[{at}].role must be \"system\", \"user\", \"assistant\" or \"tool\", got {:?}", m.role));
    }
    if m.role != "assistant" && m.content.is_none() {
        return Err(format!("messages[{at}].content must be a string"));
    }
    if (m.tool_calls.is_some() && m.role != "assistant") || (m.tool_call_id.is_some() && m.role != "tool") {
        return Err(format!("messages[{at}]: only assistant messages carry tool_calls, only tool messages tool_call_id"));
    }
    for (k, c) in m.tool_calls.iter().flatten().enumerate() {
        if c.kind != "function" || serde_json::from_str::<Value>(&c.function.arguments).map_or(true, |v| !v.is_object()) {
            return Err(format!("messages[{at}].tool_calls[{k}] must be {{ id, type: \"function\", function: {{ name, arguments: a JSON object as text }} }}"));
        }
    }
    if m.role == "tool" && m.tool_call_id.is_none() {
        return Err(format!("messages[{at}]: a tool message needs the tool_call_id it answers"));
    }
    Ok(())
}

/// The conversation in the generic format: the tools in the first system message, calls and
/// results as text.
fn generic_messages(tools: &[Tool], messages: &[ChatMessage]) -> Result<Vec<Message>, String> {
    let mut out: Vec<Message> = Vec::new();
    let mut rest = messages;
    if !tools.is_empty() {
        let mut system = tools_preamble(tools);
        if let Some((first, after)) = messages.split_first().filter(|(m, _)| m.role == "system") {
            check_message(0, first)?;
            system.push_str("\n\n");
            system.push_str(first.content.as_deref().unwrap_or_default());
            rest = after;
        }
        out.push(Message::new("system", system));
    }
    for (i, m) in rest.iter().enumerate() {
        check_message(i + messages.len() - rest.len(), m)?;
        let content = m.content.clone().unwrap_or_default();
        match m.role.as_str() {
            "assistant" => {
                let calls = m.tool_calls.as_deref().unwrap_or_default();
                let text = match (content.is_empty(), calls.is_empty()) {
                    (_, true) => content,
                    (false, false) => format!("{content}\n{}", calls_text(calls)),
                    (true, false) => calls_text(calls),
                };
                out.push(Message::new("assistant", text));
            }
            "tool" => {
                let block = format!("<tool_response>\n{content}\n</tool_response>");
                // Results of one round of calls go back as one turn.
                match out.last_mut() {
                    Some(last) if last.role == "user" && last.content.ends_with("</tool_response>") => {
                        last.content.push('\n');
                        last.content.push_str(&block);
                    }
                    _ => out.push(Message::new("user", block)),
                }
            }
            role => out.push(Message::new(role, content)),
        }
    }
    Ok(out)
}

/// The grammar a reply follows under `choice` (none: free text) in `dialect`; `parallel` lets
/// it make more than one call.
pub fn reply_format(tools: &[Tool], choice: &ToolChoice, parallel: bool, dialect: Dialect) -> Option<ResponseFormat> {
    let key = dialect.arguments_key();
    let call = |t: &Tool| {
        json!({
            "type": "object",
            "properties": { "name": { "const": t.function.name }, key: arguments_schema(&t.function) },
            "required": ["name", key],
            "additionalProperties": false,
        })
    };
    let parallel = parallel && dialect != Dialect::Llama3;
    let (chosen, many): (Vec<Value>, bool) = match choice {
        ToolChoice::None if tools.is_empty() => return None,
        ToolChoice::None => (Vec::new(), false),
        ToolChoice::Function(name) => (tools.iter().filter(|t| &t.function.name == name).map(call).collect(), false),
        ToolChoice::Auto | ToolChoice::Required => (tools.iter().map(call).collect(), parallel),
    };
    // Text may not open like a call (nor with whitespace before one), so a reply is one or the other.
    // (Neither opener is special inside a character class.)
    let text = format!("TEXT: /[^{}\\s](?s:.*)/", dialect.call_opener());
    let more = if many { "(\",\\n\" call)* " } else { "" };
    let call = single_line(json!({ "anyOf": chosen }));
    let calls = match dialect {
        Dialect::Generic => format!("calls: \"{CALL_OPEN}[\\n\" call {more}\"\\n]{CALL_CLOSE}\"\ncall: %json {call}"),
        Dialect::Hermes => format!(
            "calls: block {}\nblock: \"{CALL_OPEN}\\n\" call \"\\n{CALL_CLOSE}\"\ncall: %json {call}",
            if many { "(\"\\n\" block)*" } else { "" }
        ),
        Dialect::Llama3 => format!("calls: call\ncall: %json {call}"),
    };
    let grammar = match choice {
        ToolChoice::None => format!("start: TEXT\n{text}\n"),
        ToolChoice::Auto => format!("start: TEXT | calls\n{text}\n{calls}\n"),
        ToolChoice::Required | ToolChoice::Function(_) => format!("start: calls\n{calls}\n"),
    };
    Some(ResponseFormat::Grammar { grammar })
}

/// A reply's calls in `dialect`, when it is one: (name, arguments as written) each.
pub fn parse_calls(text: &str, dialect: Dialect) -> Option<Vec<(String, String)>> {
    #[derive(Deserialize)]
    struct Call<'a> {
        name: String,
        #[serde(borrow, alias = "parameters")]
        arguments: &'a RawValue,
    }
    let calls: Vec<Call> = match dialect {
        Dialect::Generic => serde_json::from_str(text.strip_prefix(CALL_OPEN)?.strip_suffix(CALL_CLOSE)?).ok()?,
        Dialect::Hermes => text
            .strip_prefix(CALL_OPEN)?
            .strip_suffix(CALL_CLOSE)?
            .split(BETWEEN_BLOCKS)
            .map(|inner| serde_json::from_str(inner.trim()).ok())
            .collect::<Option<_>>()?,
        Dialect::Llama3 => vec![serde_json::from_str(text).ok()?],
    };
    Some(calls.into_iter().map(|c| (c.name, c.arguments.get().to_string())).collect())
}

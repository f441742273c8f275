//! Tool calling (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`, assistant `tool_calls`
//! and `role: "tool"` messages) in radixlm's generic format, which any chat template renders:
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

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tsify::Tsify;

use crate::engine::constraint::{single_line, ResponseFormat};
use crate::tokenizer::Message;

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

/// The conversation as the chat template takes it: the tools in the first system message, calls
/// and results in the generic format.
pub fn template_messages(tools: &[Tool], messages: &[ChatMessage]) -> Result<Vec<Message>, String> {
    let mut out: Vec<Message> = Vec::new();
    let mut rest = messages;
    if !tools.is_empty() {
        let mut system = tools_preamble(tools);
        if let Some((first, after)) = messages.split_first().filter(|(m, _)| m.role == "system") {
            system.push_str("\n\n");
            system.push_str(first.content.as_deref().unwrap_or_default());
            rest = after;
        }
        out.push(Message::new("system", system));
    }
    for (i, m) in rest.iter().enumerate() {
        let at = i + messages.len() - rest.len();
        let content = m.content.clone();
        match m.role.as_str() {
            "system" | "user" => {
                let text = content.ok_or_else(|| format!("messages[{at}].content must be a string"))?;
                if m.tool_calls.is_some() || m.tool_call_id.is_some() {
                    return Err(format!("messages[{at}]: only assistant messages carry tool_calls, only tool messages tool_call_id"));
                }
                out.push(Message::new(m.role.clone(), text));
            }
            "assistant" => {
                let calls = m.tool_calls.as_deref().unwrap_or_default();
                for (k, c) in calls.iter().enumerate() {
                    if c.kind != "function" || serde_json::from_str::<Value>(&c.function.arguments).map_or(true, |v| !v.is_object()) {
                        return Err(format!("messages[{at}].tool_calls[{k}] must be {{ id, type: \"function\", function: {{ name, arguments: a JSON object as text }} }}"));
                    }
                }
                let text = match (content.filter(|c| !c.is_empty()), calls.is_empty()) {
                    (Some(c), true) => c,
                    (Some(c), false) => format!("{c}\n{}", calls_text(calls)),
                    (None, false) => calls_text(calls),
                    (None, true) => String::new(),
                };
                out.push(Message::new("assistant", text));
            }
            "tool" => {
                let text = content.ok_or_else(|| format!("messages[{at}].content must be a string"))?;
                if m.tool_call_id.is_none() {
                    return Err(format!("messages[{at}]: a tool message needs the tool_call_id it answers"));
                }
                let block = format!("<tool_response>\n{text}\n</tool_response>");
                // Results of one round of calls go back as one turn.
                match out.last_mut() {
                    Some(last) if last.role == "user" && last.content.ends_with("</tool_response>") => {
                        last.content.push('\n');
                        last.content.push_str(&block);
                    }
                    _ => out.push(Message::new("user", block)),
                }
            }
            other => return Err(format!("messages[{at}].role must be \"system\", \"user\", \"assistant\" or \"tool\", got {other:?}")),
        }
    }
    Ok(out)
}

/// The grammar a reply follows under `choice` (none: free text); `parallel` lets it make more
/// than one call.
pub fn reply_format(tools: &[Tool], choice: &ToolChoice, parallel: bool) -> Option<ResponseFormat> {
    let call = |t: &Tool| {
        json!({
            "type": "object",
            "properties": { "name": { "const": t.function.name }, "arguments": arguments_schema(&t.function) },
            "required": ["name", "arguments"],
            "additionalProperties": false,
        })
    };
    let (chosen, many): (Vec<Value>, bool) = match choice {
        ToolChoice::None if tools.is_empty() => return None,
        ToolChoice::None => (Vec::new(), false),
        ToolChoice::Function(name) => (tools.iter().filter(|t| &t.function.name == name).map(call).collect(), false),
        ToolChoice::Auto | ToolChoice::Required => (tools.iter().map(call).collect(), parallel),
    };
    // Text may not open like a call (nor with whitespace before one), so a reply is one or the other.
    let text = "TEXT: /[^<\\s](?s:.*)/";
    let calls = format!(
        "calls: \"{CALL_OPEN}[\\n\" call {}\"\\n]{CALL_CLOSE}\"\ncall: %json {}",
        if many { "(\",\\n\" call)* " } else { "" },
        single_line(json!({ "anyOf": chosen }))
    );
    let grammar = match choice {
        ToolChoice::None => format!("start: TEXT\n{text}\n"),
        ToolChoice::Auto => format!("start: TEXT | calls\n{text}\n{calls}\n"),
        ToolChoice::Required | ToolChoice::Function(_) => format!("start: calls\n{calls}\n"),
    };
    Some(ResponseFormat::Grammar { grammar })
}

/// A reply's calls, when it is one: (name, arguments as written) each.
pub fn parse_calls(text: &str) -> Option<Vec<(String, String)>> {
    #[derive(Deserialize)]
    struct Call<'a> {
        name: String,
        #[serde(borrow)]
        arguments: &'a RawValue,
    }
    let inner = text.strip_prefix(CALL_OPEN)?.strip_suffix(CALL_CLOSE)?;
    let calls: Vec<Call> = serde_json::from_str(inner).ok()?;
    Some(calls.into_iter().map(|c| (c.name, c.arguments.get().to_string())).collect())
}
